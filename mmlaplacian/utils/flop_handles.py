"""FLOP counts for the traced ops that mmengine's ``FlopAnalyzer`` skips.

mmengine's counter (fvcore's jit counter) traces a model and counts the
ops it has a handle for: linear layers, convolutions, matmuls, norms,
pooling and resizing, one multiply-accumulate (MAC) = one FLOP, the
convention of the PVT, SOFT and Swin papers. It has no handle for our fused
operators, which appear in the trace as ``mmlaplacian::<op>``,
nor for ``baddbmm``, ``scaled_dot_product_attention``, the variance of the
whitening or ``linalg.inv``. The handles below count them with these
conventions:

* Laplacian kernel ``exp(-||x_i - y_j||_1)`` of ``x (B, N, d)`` and
  ``y (B, M, d)``: ``B·N·M·d``, one MAC-equivalent per ``|x - y|``
  accumulation (the same as the ``x @ yᵀ`` of the Gaussian kernel);
* Newton–Schulz inverse of ``A (B, m, m)``: ``iters · 2m³`` per matrix
  (``A·X`` and ``X·(A·X)`` per step), the iteration count read from the
  traced call;
* ``torch.linalg.inv``: ``m³`` per matrix;
* ``baddbmm(C, (B, n, k), (B, k, p))``: ``B·n·k·p``, like ``bmm``;
* softmax attention ``softmax(Q·Kᵀ)·V``: ``Q·Kᵀ`` and ``P·V``, i.e.
  ``2·N²·C`` for N tokens and C channels (any number of heads);
* a variance (``var``, ``var_mean``, ``std``, ``std_mean``): 4 per element
  of its input. In our models the only variance is the per-sample whitening
  of the ``N×m`` query similarities, and 4 per element (mean, variance,
  centring, scaling) is how mmengine counts a norm without affine.

Every count comes from the shapes in the trace, never from module
attributes, so it follows the model code wherever it changes.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Counter, Dict, List

from mmengine.analysis.jit_handles import get_shape

Handle = Callable[[List[Any], List[Any]], Counter[str]]

# Counter keys: the names under which ``by_operator()`` reports each count.
LAPLACE_KERNEL = 'laplace_kernel'
NEWTON_SCHULZ = 'newton_schulz'
WHITENING_VARIANCE = 'whitening_variance'
SOFTMAX_ATTENTION = 'softmax_attention'
EXACT_INVERSE = 'linalg_inv'
BADDBMM = 'baddbmm'

LAPLACE_KERNEL_OP = 'mmlaplacian::laplace_kernel'
NEWTON_SCHULZ_OP = 'mmlaplacian::newton_schulz_inverse'
# impl='pytorch': the references' autograd Functions.
LAPLACE_KERNEL_REFERENCE = 'prim::PythonOp.LaplaceKernelReference'
NEWTON_SCHULZ_REFERENCE = 'prim::PythonOp.NewtonSchulzReference'


def _shape(value: Any, op: str, rank: int = None) -> List[int]:
    """The traced shape of ``value``; a clear error when it is unknown."""
    shape = get_shape(value)
    if shape is None or (rank is not None and len(shape) != rank):
        raise ValueError(f'{op}: expected a traced tensor of rank {rank}, '
                         f'got shape {shape}')
    return shape


def _counter(key: str, flops: int) -> Counter[str]:
    return Counter({key: int(flops)})


def laplace_kernel_flops(inputs: List[Any],
                         outputs: List[Any]) -> Counter[str]:
    """``B·N·M·d`` for ``x (B, N, d)``, ``y (B, M, d)``."""
    batch, rows, dims = _shape(inputs[0], LAPLACE_KERNEL_OP, 3)
    cols = _shape(inputs[1], LAPLACE_KERNEL_OP, 3)[1]
    return _counter(LAPLACE_KERNEL, batch * rows * cols * dims)


def newton_schulz_flops(inputs: List[Any],
                        outputs: List[Any]) -> Counter[str]:
    """``iters · 2m³`` per matrix of ``A (B, m, m)``.

    The iteration count is the operator's second argument, a constant of
    the traced graph (``A, num_iters, init``); the reference's autograd
    Function keeps it among the node's scalar arguments.
    """
    batch, size, _ = _shape(inputs[0], NEWTON_SCHULZ_OP, 3)
    if len(inputs) > 1:
        iters = inputs[1].toIValue()
    else:
        scalars = outputs[0].node().scalar_args()
        iters = scalars[0] if scalars else None
    if not isinstance(iters, int):
        raise ValueError(f'{NEWTON_SCHULZ_OP}: expected the iteration count '
                         f'as the second argument, got {iters!r}')
    return _counter(NEWTON_SCHULZ, batch * iters * 2 * size**3)


def linalg_inv_flops(inputs: List[Any], outputs: List[Any]) -> Counter[str]:
    """``m³`` per matrix of ``A (..., m, m)``."""
    shape = _shape(inputs[0], 'aten::linalg_inv')
    return _counter(EXACT_INVERSE, math.prod(shape[:-2]) * shape[-1]**3)


def baddbmm_flops(inputs: List[Any], outputs: List[Any]) -> Counter[str]:
    """``B·n·k·p`` for ``baddbmm(C, (B, n, k), (B, k, p))``."""
    batch, rows, inner = _shape(inputs[1], 'aten::baddbmm', 3)
    cols = _shape(inputs[2], 'aten::baddbmm', 3)[2]
    return _counter(BADDBMM, batch * rows * inner * cols)


def softmax_attention_flops(inputs: List[Any],
                            outputs: List[Any]) -> Counter[str]:
    """``Q·Kᵀ`` and ``P·V`` of ``Q (..., L, E)``, ``K (..., S, E)``,
    ``V (..., S, Ev)``: ``L·S·(E + Ev)`` per leading index."""
    op = 'aten::scaled_dot_product_attention'
    query, key, value = (_shape(v, op) for v in inputs[:3])
    lead = math.prod(query[:-2])
    return _counter(SOFTMAX_ATTENTION,
                    lead * query[-2] * key[-2] * (query[-1] + value[-1]))


def variance_flops(inputs: List[Any], outputs: List[Any]) -> Counter[str]:
    """4 per element of the input (the whitening's convention)."""
    return _counter(WHITENING_VARIANCE,
                    4 * math.prod(_shape(inputs[0], 'aten::var')))


OP_HANDLES: Dict[str, Handle] = {
    LAPLACE_KERNEL_OP: laplace_kernel_flops,
    NEWTON_SCHULZ_OP: newton_schulz_flops,
    LAPLACE_KERNEL_REFERENCE: laplace_kernel_flops,
    NEWTON_SCHULZ_REFERENCE: newton_schulz_flops,
    'aten::linalg_inv': linalg_inv_flops,
    'aten::linalg_inv_ex': linalg_inv_flops,
    'aten::baddbmm': baddbmm_flops,
    'aten::scaled_dot_product_attention': softmax_attention_flops,
    'aten::var': variance_flops,
    'aten::var_mean': variance_flops,
    'aten::std': variance_flops,
    'aten::std_mean': variance_flops,
}
