"""Running an exported model in onnxruntime (CPU), and timing both
runtimes the same way."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, List, Sequence

import numpy as np
import torch


def ort_session(path: str, num_threads: int = 0):
    """A CPU ``onnxruntime.InferenceSession`` of the stock wheel.

    Args:
        path (str): The ``.onnx`` file.
        num_threads (int): Intra-op threads; 0 uses torch's thread count, so
            both runtimes get the same cores.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = num_threads or torch.get_num_threads()
    options.inter_op_num_threads = 1
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
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return Latency(statistics.median(times), min(times), runs)


def output_shapes(outputs: Sequence[np.ndarray]) -> List[tuple]:
    return [tuple(out.shape) for out in outputs]
