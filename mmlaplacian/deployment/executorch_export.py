"""Export to an ExecuTorch program (``.pte``) lowered to XNNPACK.

The path is ``torch.export`` → our operators rewritten by their export
forms (:func:`mmlaplacian.ops.export_decompositions`) → ExecuTorch's edge
dialect, with XNNPACK's partitioner taking what it can run → ``.pte``.
Operators XNNPACK does not take run on ExecuTorch's portable kernels; the
result lists them, so their cost can be judged.

Needs ``executorch`` (``pip install executorch``, which brings torchao).
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import List, Sequence

import torch
import torch.nn as nn

from mmlaplacian.ops.export_forms import export_decompositions

DELEGATE_CALL = 'executorch_call_delegate'
# Graph plumbing that is no computation: left out of the portable-op list.
_PLUMBING = ('getitem', 'executorch_call_delegate', 'alloc')


@dataclass
class ExecuTorchResult:
    """What :func:`export_executorch` produced.

    Attributes:
        path (str): The ``.pte`` file.
        seconds (float): Export and lowering wall time.
        delegated (int): Subgraphs run by XNNPACK.
        portable_ops (Counter[str]): Operators left to the portable
            kernels, by name, with their counts.
    """
    path: str
    seconds: float
    delegated: int
    portable_ops: Counter = field(default_factory=Counter)


def _short_name(target) -> str:
    name = getattr(target, '__name__', None) or str(target)
    return name.split(' ')[0].replace('<EdgeOpOverload:', '').strip('<>:')


def export_executorch(module: nn.Module,
                      example: torch.Tensor,
                      path: str,
                      laplace: str = 'auto') -> ExecuTorchResult:
    """Export ``module(example)`` to an XNNPACK-lowered ExecuTorch program.

    Args:
        module (nn.Module): Takes one tensor and returns a tensor or a tuple
            of tensors (e.g. :class:`~mmlaplacian.deployment.
            BackboneForExport`).
        example (Tensor): The example input; the program has its shape.
        path (str): Output ``.pte`` file.
        laplace (str): Graph form of the Laplacian kernel
            (:mod:`mmlaplacian.ops.export_forms`).

    Returns:
        ExecuTorchResult: The file, the time and what did not lower.

    Raises:
        ImportError: executorch is not installed (the message says how to
            install it).
    """
    try:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import \
            XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower
    except ImportError as err:
        raise ImportError('export_executorch needs executorch: pip install '
                          f'executorch ({err})') from err
    start = time.perf_counter()
    with torch.no_grad():
        program = torch.export.export(module.eval(), (example, ))
    program = program.run_decompositions(export_decompositions(laplace))
    edge = to_edge_transform_and_lower(
        program, partitioner=[XnnpackPartitioner()])
    nodes = [
        node for node in edge.exported_program().graph_module.graph.nodes
        if node.op == 'call_function'
    ]
    with open(path, 'wb') as f:
        f.write(edge.to_executorch().buffer)
    names = [_short_name(node.target) for node in nodes]
    return ExecuTorchResult(
        path=path,
        seconds=time.perf_counter() - start,
        delegated=names.count(DELEGATE_CALL),
        portable_ops=Counter(
            n for n in names if not any(p in n for p in _PLUMBING)))


def run_executorch(path: str,
                   inputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """Run the ``forward`` method of a ``.pte`` program in ExecuTorch's
    runtime; returns its outputs."""
    from executorch.runtime import Runtime
    method = Runtime.get().load_program(path).load_method('forward')
    return list(method.execute(list(inputs)))
