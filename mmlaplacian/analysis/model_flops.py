"""FLOPs of any built model (classifier, detector) that holds our attention.

mmengine's ``get_model_complexity_info`` traces the model with
``FlopAnalyzer`` (fvcore's jit counter). It counts the linear layers, convs
and matmuls, but not the fused custom autograd ops (kernel matrices,
Newton–Schulz inverse), the whitening, or ``scaled_dot_product_attention``.
Adding the analytic attention count to its total would count the attention's
q/v/proj linears, depthwise conv and context matmuls twice, so we *replace*
instead: for every :class:`LaplacianAttention` / :class:`SoftmaxAttention`
module, the traced FLOPs of that module (everything executed inside its
``__call__``) are subtracted and the analytic FLOPs of the same call are
added. The token grid of each call is recorded by a forward pre-hook during
the trace itself, so detection inputs of any size are handled.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Tuple, Union

import torch
import torch.nn as nn
from mmengine.analysis import FlopAnalyzer, parameter_count

from mmlaplacian.models.layers import LaplacianAttention, SoftmaxAttention
from .attention_flops import attention_module_flops

ATTENTION_TYPES = (LaplacianAttention, SoftmaxAttention)


@dataclass
class ModelFlops:
    """Result of :func:`count_model_flops`.

    Attributes:
        flops (int): Total FLOPs (MACs) with the attention counted
            analytically.
        params (int): Parameters of the model.
        traced_flops (int): What mmengine's tracer alone counts.
        attention_traced (int): The part of ``traced_flops`` inside attention
            modules (replaced).
        attention_analytic (int): The analytic FLOPs of the same calls.
        flops_by_module (dict[str, int]): Corrected FLOPs of the top-level
            children (``backbone``, ``neck``, ``rpn_head``, ...).
        params_by_module (dict[str, int]): Parameters of those children.
    """
    flops: int
    params: int
    traced_flops: int
    attention_traced: int
    attention_analytic: int
    flops_by_module: Dict[str, int] = field(default_factory=dict)
    params_by_module: Dict[str, int] = field(default_factory=dict)


def _record_calls(model: nn.Module) -> Tuple[Dict[str, List], list]:
    """Pre-hooks noting ``(batch, hw_shape)`` of every attention call."""
    calls: Dict[str, List[Tuple[int, Tuple[int, int]]]] = defaultdict(list)
    handles = []
    for name, module in model.named_modules():
        if not isinstance(module, ATTENTION_TYPES):
            continue

        def hook(mod, args, kwargs, name=name):
            x = args[0] if args else kwargs['x']
            hw_shape = args[1] if len(args) > 1 else kwargs.get('hw_shape')
            if hw_shape is None:  # SoftmaxAttention without a grid
                hw_shape = (1, int(x.shape[1]))
            calls[name].append(
                (int(x.shape[0]), tuple(int(s) for s in hw_shape)))

        handles.append(
            module.register_forward_pre_hook(hook, with_kwargs=True))
    return calls, handles


def count_model_flops(
        model: nn.Module, inputs: Union[torch.Tensor,
                                        Tuple]) -> ModelFlops:
    """Count FLOPs by tracing, with attention modules counted analytically.

    Args:
        model (nn.Module): The model, in the mode to count (usually eval).
        inputs (Tensor | tuple): Positional inputs of ``model.forward``.

    Returns:
        ModelFlops: Totals and the per-child breakdown.
    """
    inputs = inputs if isinstance(inputs, tuple) else (inputs, )
    calls, handles = _record_calls(model)
    analyzer = FlopAnalyzer(model, inputs)
    analyzer.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    analyzer.tracer_warnings('none')
    try:
        traced = analyzer.total()  # traces the model once
    finally:
        for handle in handles:
            handle.remove()

    modules = dict(model.named_modules())
    delta: Dict[str, int] = {}
    traced_attn = analytic_attn = 0
    for name, records in calls.items():
        analytic = sum(batch * attention_module_flops(modules[name], hw)
                       for batch, hw in records)
        traced_here = analyzer.total(name)
        traced_attn += traced_here
        analytic_attn += analytic
        delta[name] = analytic - traced_here

    def corrected(prefix: str) -> int:
        return analyzer.total(prefix) + sum(
            d for name, d in delta.items()
            if name == prefix or name.startswith(prefix + '.'))

    params = parameter_count(model)
    children = [name for name, _ in model.named_children()]
    return ModelFlops(
        flops=traced + sum(delta.values()),
        params=params[''],
        traced_flops=traced,
        attention_traced=traced_attn,
        attention_analytic=analytic_attn,
        flops_by_module={name: corrected(name)
                         for name in children},
        params_by_module={name: params.get(name, 0)
                          for name in children})
