"""Running an exported model in onnxruntime (CPU), and timing both
runtimes the same way."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, List, Sequence

import numpy as np
import torch


def ort_session(path: str, num_threads: int = 0, arena: bool = True):
    """A CPU ``onnxruntime.InferenceSession`` of the stock wheel.

    Args:
        path (str): The ``.onnx`` file.
        num_threads (int): Intra-op threads; 0 uses torch's thread count, so
            both runtimes get the same cores.
        arena (bool): onnxruntime's CPU memory arena. It keeps freed blocks
            and grows by doubling: off, the LaplacianFormer-T backbone's
            peak at 800x1344 halved at equal latency in our measurement.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = num_threads or torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.enable_cpu_mem_arena = arena
    options.graph_optimization_level = \
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: no constant-folding notes
    return ort.InferenceSession(path,
                                sess_options=options,
                                providers=['CPUExecutionProvider'])


def ort_run(session, image: torch.Tensor) -> List[np.ndarray]:
    """Run the session on one input tensor; outputs in graph order."""
    name = session.get_inputs()[0].name
    return session.run(None, {name: image.detach().cpu().numpy()})


@dataclass
class Latency:
    """Wall-clock seconds per call: median and minimum of ``runs``."""
    median: float
    minimum: float
    runs: int


def time_calls(fn: Callable[[], object],
               runs: int = 3,
               warmup: int = 1) -> Latency:
    """Time ``fn()`` ``runs`` times after ``warmup`` untimed calls."""
    return time_interleaved([fn], runs, warmup)[0]


def output_shapes(outputs: Sequence[np.ndarray]) -> List[tuple]:
    return [tuple(out.shape) for out in outputs]


def time_interleaved(fns: Sequence[Callable[[], object]],
                     runs: int = 3,
                     warmup: int = 1) -> List[Latency]:
    """Time several callables in turns (``a, b, a, b, ...``), so that a
    change of load on a shared machine hits each of them alike.

    Returns:
        list[Latency]: One per callable, in order.
    """
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: List[List[float]] = [[] for _ in fns]
    for _ in range(runs):
        for fn, spent in zip(fns, times):
            start = time.perf_counter()
            fn()
            spent.append(time.perf_counter() - start)
    return [Latency(statistics.median(t), min(t), runs) for t in times]
