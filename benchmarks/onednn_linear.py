"""Inductor's freezing with float32 linear layers packed for oneDNN.

When inductor freezes a model on an x86 CPU it packs the weights of
bfloat16 linear layers for oneDNN (``mkldnn::_linear_pointwise``) but those
of float32 layers for MKL (``mkl::_mkl_linear``). Only the oneDNN form takes
what follows a linear layer, the FFN's GELU or a residual add, into its GEMM
as a post-op; with MKL each is a pass of its own over the output. Packing
float32 weights for oneDNN as well is torch's own bfloat16 path applied to
float32: the arithmetic stays float32.

torch has no switch for the choice that keeps float32 arithmetic
(``torch.backends.mkldnn.matmul.fp32_precision`` routes to oneDNN in
bfloat16 or TF32), so :func:`set_onednn_linear_packing` sets it in
inductor's packing pass, for the whole process, when the pass has the form
this module knows. ``benchmarks.compiled_speed --onednn-linear`` times it
against torch's packing; ``tools/test.py --compile`` keeps torch's
(``docs/benchmarks.md``: 1.04-1.18x of freezing's speed, not worth a patch
of torch's internals in the product). It has to be on when a model
compiles, at its first call: compiled code keeps the packing it was made
with. The packing happens as the graph is frozen, so frozen graphs of either
packing do not share inductor's cache.
"""
from __future__ import annotations

import contextlib
import inspect
import warnings
from typing import Callable, Dict, Iterator, Optional

__all__ = ['onednn_linear_packing', 'onednn_linear_packing_enabled',
           'set_onednn_linear_packing']

# The packing methods of inductor's x86 device op, and the parameters they
# are known to take: ``is_lp_weight`` picks oneDNN (True) or MKL (False).
_METHODS = {
    'pack_linear_weight': ['self', 'graph', 'is_lp_weight',
                           'transpose_weight_node', 'batch_size'],
    'pack_linear': ['self', 'graph', 'is_lp_weight', 'batch_size', 'input',
                    'packed_weight_node', 'bias'],
}
_originals: Dict[str, Callable] = {}


def _device_op() -> Optional[type]:
    """Inductor's x86 device op class, or ``None`` when this torch has
    none in the known form (no oneDNN, or another version's pass)."""
    try:
        from torch._inductor.fx_passes import mkldnn_fusion
    except ImportError:
        return None
    device_op = getattr(mkldnn_fusion, 'CpuMkldnnDeviceOp', None)
    if device_op is None:
        return None
    for name, parameters in _METHODS.items():
        method = _originals.get(name, getattr(device_op, name, None))
        if method is None or list(
                inspect.signature(method).parameters) != parameters:
            return None
    return device_op


def _as_onednn(original: Callable) -> Callable:
    """``original`` with every weight taken as a bfloat16 one: packed for,
    and multiplied by, oneDNN."""

    def packing_for_onednn(self, graph, is_lp_weight: bool, *args,
                           **kwargs):
        return original(self, graph, True, *args, **kwargs)

    packing_for_onednn.__wrapped__ = original
    return packing_for_onednn


def onednn_linear_packing_enabled() -> bool:
    """Whether inductor now packs float32 linear weights for oneDNN."""
    return bool(_originals)


def set_onednn_linear_packing(enabled: bool) -> bool:
    """Make inductor's freezing pack float32 linear weights for oneDNN
    (``enabled``) or for MKL, torch's default, in this process.

    Args:
        enabled (bool): oneDNN when true, torch's default when false.

    Returns:
        bool: Whether float32 linear weights are now packed for oneDNN.
        With a torch whose packing pass has another form it stays torch's
        default, with a warning.
    """
    device_op = _device_op()
    if device_op is None:
        if enabled:
            warnings.warn('this torch has no inductor packing pass of the '
                          'known form: float32 linear layers stay packed as '
                          'torch packs them')
        return False
    if enabled and not _originals:
        for name in _METHODS:
            _originals[name] = getattr(device_op, name)
            setattr(device_op, name, _as_onednn(_originals[name]))
    elif not enabled and _originals:
        for name in _METHODS:
            setattr(device_op, name, _originals.pop(name))
    return onednn_linear_packing_enabled()


@contextlib.contextmanager
def onednn_linear_packing(enabled: bool = True) -> Iterator[bool]:
    """:func:`set_onednn_linear_packing` within a ``with`` block; the
    packing in force before comes back after it.

    Args:
        enabled (bool): oneDNN inside the block when true, torch's default
            when false.

    Yields:
        bool: Whether float32 linear weights are packed for oneDNN inside.
    """
    before = onednn_linear_packing_enabled()
    try:
        yield set_onednn_linear_packing(enabled)
    finally:
        set_onednn_linear_packing(before)
