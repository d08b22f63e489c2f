"""FLOPs and parameters of any built model, traced by mmengine.

``count_model_flops`` traces the model once with mmengine's
``FlopAnalyzer`` (fvcore's jit counter) plus the handles of
:mod:`mmlaplacian.utils.flop_handles` for our fused ops, so every figure
follows from the built model: nothing about the architecture is written
down here. Traced, a layer in its default mode runs its full (unchunked)
form, so the counts are the model's arithmetic.

Example:
    >>> from mmlaplacian.utils.flops import count_model_flops
    >>> result = count_model_flops(model.eval(), (torch.rand(1, 3, 224, 224),))
    >>> result.flops, result.by_operator['newton_schulz']
"""
from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from functools import partial
from typing import Counter, Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.analysis import FlopAnalyzer, parameter_count

from .flop_handles import NEWTON_SCHULZ, OP_HANDLES


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


def build_model(cfg) -> Tuple[nn.Module, str]:
    """Build ``cfg.model`` in its config's scope; returns model and scope."""
    from mmengine.registry import init_default_scope

    scope = cfg.get('default_scope', 'mmdet')
    init_default_scope(scope)
    registry = importlib.import_module(f'{scope}.registry').MODELS
    model_cfg = cfg.model.copy()
    if cfg.get('data_preprocessor') is not None:
        model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
    return registry.build(model_cfg), scope


def _detector_inputs(model: nn.Module, shape: Tuple[int, int]):
    from mmdet.structures import DetDataSample
    divisor = getattr(model.data_preprocessor, 'pad_size_divisor', 1) or 1
    padded = tuple(math.ceil(s / divisor) * divisor for s in shape)
    sample = DetDataSample(
        metainfo=dict(
            img_shape=shape,
            ori_shape=shape,
            pad_shape=padded,
            batch_input_shape=padded,
            scale_factor=(1.0, 1.0)))
    return torch.rand(1, 3, *padded), [sample]


def count_config(cfg, shape: Optional[Sequence[int]] = None
                 ) -> Tuple[ModelFlops, Tuple[int, int]]:
    """Build the model of ``cfg`` and count it on one image.

    Detector FLOPs are those of ``mode='tensor'`` (backbone, neck, heads; no
    post-processing), as in mmdet's own ``get_flops``.

    Args:
        cfg (Config): A classifier (mmpretrain) or detector (mmdet) config.
        shape (Sequence[int], optional): ``(H, W)`` or ``(S, )``; defaults
            to 224x224 for a classifier, 800x1333 for a detector.

    Returns:
        tuple[ModelFlops, tuple[int, int]]: The counts and the input shape
        actually fed (a detector's input is padded like its preprocessor).
    """
    model, scope = build_model(cfg)
    model.eval()
    if shape is None:
        shape = (224, 224) if scope == 'mmpretrain' else (800, 1333)
    shape = (shape[0], shape[0]) if len(shape) == 1 else tuple(shape[:2])
    if scope == 'mmdet':
        inputs, samples = _detector_inputs(model, shape)
    else:
        inputs, samples = torch.rand(1, 3, *shape), None
    model.forward = partial(model.forward, data_samples=samples, mode='tensor')
    result = count_model_flops(model, (inputs, ))
    return result, tuple(inputs.shape[-2:])
