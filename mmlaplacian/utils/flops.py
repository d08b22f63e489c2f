"""FLOPs and parameters of any built model, traced by mmengine.

``count_model_flops`` traces the model once with mmengine's
``FlopAnalyzer`` (fvcore's jit counter) plus the handles of
:mod:`flop_handles` for our fused ops, so every figure follows from the
built model: nothing about the architecture is written down here. Tracing
always runs the plain attention path (the chunked CPU-inference layer is
skipped under ``torch.jit`` tracing), whose arithmetic is the model's.

Example:
    >>> from model_flops import count_model_flops
    >>> result = count_model_flops(model.eval(), (torch.rand(1, 3, 224, 224),))
    >>> result.flops, result.by_operator['newton_schulz']
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Counter, Dict, Tuple, Union

import torch
import torch.nn as nn
from mmengine.analysis import FlopAnalyzer, parameter_count

from flop_handles import NEWTON_SCHULZ, OP_HANDLES


@dataclass
class ModelFlops:
    """Result of :func:`count_model_flops` (FLOPs are multiply-accumulates).

    Attributes:
        flops (int): Total FLOPs of one forward call.
        params (int): Parameters of the model.
        by_operator (Counter[str]): FLOPs per operator kind (``linear``,
            ``conv``, ``laplace_kernel``, ``newton_schulz``, ...).
        flops_by_module (dict[str, int]): FLOPs of the top-level children
            (``backbone``, ``neck``, ``head``, ...).
        params_by_module (dict[str, int]): Parameters of those children.
        uncounted_python_ops (Counter[str]): Custom autograd Functions and
            our operators met in the trace that no handle counts (their
            arithmetic is missing).
    """
    flops: int
    params: int
    by_operator: Counter[str]
    flops_by_module: Dict[str, int] = field(default_factory=dict)
    params_by_module: Dict[str, int] = field(default_factory=dict)
    uncounted_python_ops: Counter[str] = field(default_factory=Counter)

    @property
    def newton_schulz_flops(self) -> int:
        """FLOPs of the Newton–Schulz inverses (independent of the image)."""
        return self.by_operator.get(NEWTON_SCHULZ, 0)


def flop_analyzer(model: nn.Module, inputs: Tuple) -> FlopAnalyzer:
    """mmengine's ``FlopAnalyzer`` with our op handles, warnings off."""
    analyzer = FlopAnalyzer(model, inputs)
    analyzer.set_op_handle(**OP_HANDLES)
    analyzer.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    analyzer.tracer_warnings('none')
    return analyzer


def count_model_flops(model: nn.Module,
                      inputs: Union[torch.Tensor, Tuple]) -> ModelFlops:
    """Trace ``model(*inputs)`` once and count its FLOPs and parameters.

    Args:
        model (nn.Module): The model, in the mode to count (usually eval).
        inputs (Tensor | tuple): Positional inputs of ``model.forward``.

    Returns:
        ModelFlops: Totals, per operator and per top-level child.
    """
    inputs = inputs if isinstance(inputs, tuple) else (inputs, )
    analyzer = flop_analyzer(model, inputs)
    with torch.no_grad():
        total = analyzer.total()  # traces the model once
    uncounted = Counter({
        op: count
        for op, count in analyzer.unsupported_ops().items()
        if op.startswith(('prim::PythonOp', 'mmlaplacian::'))
    })
    params = parameter_count(model)
    children = [name for name, _ in model.named_children()]
    return ModelFlops(
        flops=total,
        params=params[''],
        by_operator=Counter(analyzer.by_operator()),
        flops_by_module={name: analyzer.total(name)
                         for name in children},
        params_by_module={name: params.get(name, 0)
                          for name in children},
        uncounted_python_ops=uncounted)
