"""Faster evaluation: ``tools/test.py --amp`` and ``--compile``.

mmengine compiles only in ``Runner.train`` (``cfg.compile``), and its
test-time ``fp16`` autocasts the whole model, which on a CPU stops in mmcv's
NMS (it has no bfloat16 kernel). These helpers act on the built model's
feature extractor instead, the backbone and the neck, where nearly all of
the arithmetic is, and leave the heads and their postprocessing in float32:

- :func:`run_in_bfloat16`: the parts run under CPU bfloat16 autocast and
  return float32 (the same split as ``--amp`` in training,
  :class:`~mmlaplacian.engine.CPUAutocastOptimWrapper`). On a CUDA device
  ``--amp`` is mmengine's own float16 test loop instead
  (:func:`configure_test_amp`).
- :func:`compile_parts`: ``nn.Module.compile`` on each part, with inductor's
  freezing for evaluation. It compiles in place, so the checkpoint's keys
  and the model's structure do not change.

bfloat16 matrix products are fast only on CPUs with AMX or AVX512-BF16; on
others they are emulated and slower than float32, and the helpers say so.
"""
from __future__ import annotations

import functools
import warnings
from typing import Callable, List, Sequence

import torch
import torch.nn as nn
from mmengine.config import Config

from .cpu_autocast import FEATURE_PARTS, feature_parts, to_float32

# mmdet pads a batch to a multiple of 32 pixels: COCO's images, resized to
# fit 1333x800, come in a few dozen padded sizes.
MAX_SIZES = 64

__all__ = ['FEATURE_PARTS', 'MAX_SIZES', 'compile_parts',
           'configure_test_amp', 'cpu_has_fast_bfloat16', 'run_in_bfloat16']


def cpu_has_fast_bfloat16() -> bool:
    """Whether this CPU runs bfloat16 matrix products natively (AMX tiles
    or AVX512-BF16); torch builds without the probes answer ``False``."""
    probes = ('_is_amx_tile_supported', '_is_avx512_bf16_supported')
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def configure_test_amp(cfg: Config) -> bool:
    """Set up ``--amp`` for evaluation in ``cfg``, before the runner exists.

    On a CUDA device this is mmengine's test loop with float16 autocast over
    the whole model (mmcv's CUDA kernels take float16). On a CPU nothing in
    the config changes: the caller applies :func:`run_in_bfloat16` to the
    built model.

    Returns:
        bool: Whether the model still needs :func:`run_in_bfloat16`.
    """
    if torch.cuda.is_available():
        cfg.test_cfg = cfg.get('test_cfg') or dict(type='TestLoop')
        cfg.test_cfg.fp16 = True
        return False
    if not cpu_has_fast_bfloat16():
        warnings.warn('--amp: this CPU has neither AMX nor AVX512-BF16, so '
                      'bfloat16 products are emulated and may be slower '
                      'than float32')
    return True


def run_in_bfloat16(model: nn.Module,
                    names: Sequence[str] = FEATURE_PARTS) -> List[str]:
    """Run the named parts of ``model`` under CPU bfloat16 autocast.

    Each part's outputs return to float32, so the heads that follow see the
    dtype they were written for. Applying it twice changes nothing.

    Args:
        model (nn.Module): A detector, segmentor or classifier, possibly in
            a DDP or test-time-augmentation wrapper.
        names (Sequence[str]): Its children to run in bfloat16; the whole
            model when it has none of them.

    Returns:
        list[str]: The class names of the parts now in bfloat16.
    """
    parts = feature_parts(model, names)
    for part in parts:
        if not getattr(part.forward, 'runs_in_bfloat16', False):
            # An instance attribute: nn.Module.__call__ and a compiled
            # _call_impl both reach it through ``self.forward``.
            part.forward = _bfloat16_forward(part.forward)
    return [type(part).__name__ for part in parts]


def compile_parts(model: nn.Module,
                  names: Sequence[str] = FEATURE_PARTS,
                  freezing: bool = False) -> List[str]:
    """Compile the named parts of ``model`` with inductor, in place.

    Each input size gets code of its own: the first call at a new size
    compiles it (tens of seconds on a CPU), later calls at that size run the
    compiled code, specialised to it (``dynamic=False``: the code whose
    speed ``docs/benchmarks.md`` reports); up to :data:`MAX_SIZES` sizes
    are compiled, further ones run eager. ``torch.compile``'s default,
    automatic dynamic shapes, works too: it compiles one graph per landmark
    grid.

    Args:
        model (nn.Module): As for :func:`run_in_bfloat16`.
        names (Sequence[str]): Its children to compile.
        freezing (bool): Turn on inductor's freezing for this process: the
            weights become constants of the compiled code, packed once for
            oneDNN (in bfloat16 under autocast, where eager casts them at
            every call) and BatchNorm folded into the convolutions. Only for
            inference: the weights must not change after the first call, and
            gradients must be off.

    Returns:
        list[str]: The class names of the compiled parts.
    """
    if freezing:
        # Read when a part compiles, at its first call.
        torch._inductor.config.freezing = True
    limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = max(limit, MAX_SIZES)
    parts = feature_parts(model, names)
    for part in parts:
        part.compile(dynamic=False)
    return [type(part).__name__ for part in parts]


def _bfloat16_forward(forward: Callable) -> Callable:

    @functools.wraps(forward)
    def forward_in_bfloat16(*args, **kwargs):
        with torch.autocast(device_type='cpu', dtype=torch.bfloat16):
            outputs = forward(*args, **kwargs)
        return to_float32(outputs)

    forward_in_bfloat16.runs_in_bfloat16 = True
    return forward_in_bfloat16
