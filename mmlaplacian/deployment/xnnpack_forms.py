"""Forms of standard operators that XNNPACK runs in its fast kernels.

``torch.export`` writes some operators in a form that XNNPACK either runs
in a slow kernel or leaves to ExecuTorch's portable kernels, single-threaded
loops. :func:`apply_xnnpack_forms` rewrites those nodes of an exported
program into the same arithmetic in operators XNNPACK runs well, and leaves
every other node as it is:

- **Softmax attention.** The stock decomposition of
  ``scaled_dot_product_attention`` guards rows whose every score is
  ``-inf`` (``eq``, ``any``, ``logical_not``, ``where`` over the whole
  ``(B, h, N, N)`` score matrix), for masks that can hide a whole row.
  XNNPACK takes none of those operators, and without a mask no row can be
  hidden. The form here is the product, softmax and product XNNPACK runs,
  with the scale folded into the queries. Tiny backbone at 800×1344: the
  guard took 150 ms of a 1.08 s program.
- **Large depthwise convolutions.** XNNPACK has depthwise kernels for up
  to 25 taps; a larger kernel runs as a grouped convolution, a GEMM per
  channel. A 9×9 depthwise convolution over 64 channels at 200×336 took
  160 ms there (the same in int8) against 24 ms in eager PyTorch. The form
  here tiles the kernel into 5×5 pieces and adds their convolutions,
  each cropped to its shift: 5×5 depthwise kernels, about 4 ms each. The
  tiles are ``conv2d`` calls, which the int8 quantizer takes like any
  other convolution.
- **Batched matrix products.** ``matmul`` of two ``(..., n, k)`` and
  ``(..., k, m)`` tensors decomposes into ``expand`` (even to the shape the
  operand already has), ``view`` and ``bmm``; ExecuTorch runs each
  ``expand`` as a portable copy (44 of them in the Tiny backbone, 25 ms at
  800×1344). With equal batch dimensions the form here is a reshape to
  three dimensions, ``bmm`` and a reshape back.
- **Means and variances over the tokens.** XNNPACK's mean takes only the
  two innermost dimensions of a 4-D tensor, so the attention's means and
  variances of ``(B, h, N, m)`` over the N tokens ran on the portable
  kernels (76 ms of the Tiny backbone at 800×1344). The form here is a
  product with a constant row of ``1/N`` (``bmm``), and the variance the
  mean of the squared deviations, in two passes as torch computes it. Both
  stay float32 in int8 programs, like the rest of the attention's
  statistics.

- **Adaptive average pooling.** The landmarks are the tokens pooled onto a
  7×7 grid whose bins rarely divide the token grid, so XNNPACK's average
  pooling cannot take them and ExecuTorch runs its portable kernel, one
  thread (6 calls, 0.9 ms of the Tiny backbone's 33 ms at 192×192). The
  form here is the pooling as one product: a constant ``(m, H·W)`` matrix
  of bin weights times the ``(H·W, C)`` tokens, which the channels-last
  map already is.

- **Long concatenations.** XNNPACK concatenates at most 5 tensors at a
  time, and ExecuTorch's lowering splits a longer ``cat`` into a chain,
  ``cat(cat(t1, …, t5), t6, …, t9)`` and so on, in which every link copies
  all that the links before it joined: the copies grow with the square of
  the number of inputs. The Laplacian kernel's row blocks are joined by
  one ``cat`` of up to a hundred blocks, so its output was copied about
  13 times over. The form here is a balanced tree of ``cat`` calls of at
  most 5 inputs, which copies every element once per level (3 levels for
  101 blocks).

Each form is a function of the node's arguments that returns ``None`` for
the cases it leaves to the stock operator. All are exact rewrites: the same
sums in another order.
"""
from __future__ import annotations

import math
from typing import (Callable, Dict, List, Mapping, Optional, Sequence,
                    Tuple)

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch._guards import detect_fake_mode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from mmlaplacian.models.layers.landmarks import pooling_matrix

aten = torch.ops.aten
# Taps of XNNPACK's largest depthwise kernel (5×5).
DEPTHWISE_TAPS = 25
TILE = 5
# Inputs of XNNPACK's largest concatenation.
CONCAT_INPUTS = 5


def softmax_attention(query: torch.Tensor,
                      key: torch.Tensor,
                      value: torch.Tensor,
                      attn_mask: Optional[torch.Tensor] = None,
                      dropout_p: float = 0.,
                      is_causal: bool = False,
                      *,
                      scale: Optional[float] = None,
                      enable_gqa: bool = False) -> Optional[torch.Tensor]:
    """``softmax(q kᵀ · scale) v`` as two products and a softmax, where
    nothing can mask a whole row; None (the stock operator) otherwise."""
    if attn_mask is not None or dropout_p or is_causal or enable_gqa:
        return None
    if scale is None:
        scale = 1. / math.sqrt(query.shape[-1])
    scores = (query * scale) @ key.transpose(-1, -2)
    return torch.softmax(scores, dim=-1) @ value


def _pair(values: Sequence[int]):
    return tuple(values) * 2 if len(values) == 1 else tuple(values)


def _tiled_depthwise(image: torch.Tensor, weight: torch.Tensor,
                     bias: Optional[torch.Tensor],
                     padding: Sequence[int]) -> torch.Tensor:
    """A stride-1 depthwise convolution as the sum of 5×5 depthwise
    convolutions, one per 5×5 tile of the kernel.

    The kernel is zero-padded to whole tiles. The tile at ``(a, b)`` is a
    convolution with the padding grown by what the tiles added, whose
    output, cropped at ``(a, b)``, is that tile's share: the shift is a crop
    of the output rather than a pad of the input, because XNNPACK refuses
    an int8 constant pad.
    """
    channels, _, kernel_h, kernel_w = weight.shape
    tiles_h, tiles_w = -(-kernel_h // TILE), -(-kernel_w // TILE)
    extra_h, extra_w = tiles_h * TILE - kernel_h, tiles_w * TILE - kernel_w
    pad = [padding[0] + extra_h, padding[1] + extra_w]
    out_h = image.shape[-2] + 2 * padding[0] - kernel_h + 1
    out_w = image.shape[-1] + 2 * padding[1] - kernel_w + 1
    kernel = F.pad(weight, (0, extra_w, 0, extra_h))
    out = None
    for a in range(0, tiles_h * TILE, TILE):
        for b in range(0, tiles_w * TILE, TILE):
            part = F.conv2d(image, kernel[..., a:a + TILE, b:b + TILE],
                            bias if out is None else None, 1, pad, 1,
                            channels)
            top, left = a + extra_h, b + extra_w
            part = part[..., top:top + out_h, left:left + out_w]
            out = part if out is None else out + part
    return out


def conv2d(image: torch.Tensor,
           weight: torch.Tensor,
           bias: Optional[torch.Tensor] = None,
           stride: Sequence[int] = (1, 1),
           padding: Sequence[int] = (0, 0),
           dilation: Sequence[int] = (1, 1),
           groups: int = 1) -> Optional[torch.Tensor]:
    """A stride-1 depthwise convolution of more than 25 taps as 5×5
    depthwise convolutions; None (the stock operator) for any other."""
    stride, padding, dilation = map(_pair, (stride, padding, dilation))
    channels, per_group, kernel_h, kernel_w = weight.shape
    depthwise = (per_group == 1 and groups == channels
                 and image.shape[-3] == channels)
    if (depthwise and kernel_h * kernel_w > DEPTHWISE_TAPS
            and stride == (1, 1) and dilation == (1, 1)):
        return _tiled_depthwise(image, weight, bias, padding)
    return None


def matmul(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``matmul`` in ``mm`` / ``bmm``, expanding an operand only where its
    batch dimensions differ from the broadcast ones."""
    if left.ndim == 1 and right.ndim == 1:
        return aten.dot.default(left, right)
    if left.ndim == 1:
        return matmul(left.unsqueeze(0), right).squeeze(-2)
    if right.ndim == 1:
        return matmul(left, right.unsqueeze(-1)).squeeze(-1)
    if right.ndim == 2:
        # Rows of every batch at once: one product with a 2-D weight.
        out = aten.mm.default(left.reshape(-1, left.shape[-1]), right)
        return out.view(*left.shape[:-1], right.shape[-1])
    batch = torch.broadcast_shapes(left.shape[:-2], right.shape[:-2])
    operands = [
        t if t.shape[:-2] == batch else t.expand(*batch, *t.shape[-2:])
        for t in (left, right)
    ]
    out = aten.bmm.default(*(t.reshape(-1, *t.shape[-2:]) for t in operands))
    return out.view(*batch, *out.shape[-2:])


def _over_tokens(x: torch.Tensor, dim: Optional[Sequence[int]]) -> bool:
    """Whether a reduction over ``dim`` is one over the second-to-last
    dimension (the tokens of ``(..., N, m)``) of a float tensor."""
    return (x.is_floating_point() and x.ndim >= 2 and dim is not None
            and len(dim) == 1 and dim[0] % x.ndim == x.ndim - 2)


def _token_mean(x: torch.Tensor, keepdim: bool) -> torch.Tensor:
    """``x.mean(-2)`` as one ``bmm`` by a constant row of ``1/N``."""
    tokens, width = x.shape[-2:]
    flat = x.reshape(-1, tokens, width)
    row = torch.full((flat.shape[0], 1, tokens), 1. / tokens,
                     dtype=x.dtype, device=x.device)
    out = torch.bmm(row, flat)
    # Views rather than a squeeze: XNNPACK takes views as reshapes.
    return out.view(*x.shape[:-2], *((1, width) if keepdim else (width, )))


def token_mean(x: torch.Tensor,
               dim: Optional[Sequence[int]],
               keepdim: bool = False,
               *,
               dtype: Optional[torch.dtype] = None
               ) -> Optional[torch.Tensor]:
    """``aten.mean.dim`` over the tokens (dimension -2) as a product; None
    (the stock operator) for any other reduction."""
    if dtype is not None or not _over_tokens(x, dim):
        return None
    return _token_mean(x, keepdim)


def token_variance(x: torch.Tensor,
                   dim: Optional[Sequence[int]] = None,
                   *,
                   correction: Optional[float] = None,
                   keepdim: bool = False) -> Optional[torch.Tensor]:
    """``aten.var.correction`` over the tokens: the mean of the squared
    deviations from the mean, both as products; None (the stock operator)
    for any other reduction, or one whose divisor is not positive."""
    if not _over_tokens(x, dim):
        return None
    tokens = x.shape[-2]
    divisor = tokens - (1 if correction is None else correction)
    if divisor <= 0:
        return None
    deviation = x - _token_mean(x, keepdim=True)
    # A square, not a product: XNNPACK runs it in float32, where the int8
    # quantizer would take a product (and add conversions around it).
    out = _token_mean(deviation.pow(2), keepdim)
    return out if divisor == tokens else out * (tokens / divisor)


def token_variance_unbiased(x: torch.Tensor,
                            dim: Optional[Sequence[int]],
                            unbiased: bool = True,
                            keepdim: bool = False) -> Optional[torch.Tensor]:
    """``aten.var.dim`` (``Tensor.var(dim, unbiased=...)``) as
    :func:`token_variance`."""
    return token_variance(x, dim, correction=int(unbiased), keepdim=keepdim)


def adaptive_average_pool(image: torch.Tensor,
                          output_size: Sequence[int]
                          ) -> Optional[torch.Tensor]:
    """``aten.adaptive_avg_pool2d`` of a float ``(B, C, H, W)`` map as a
    product with the constant ``(m, H·W)`` bin weights, ``m = h·w`` the
    output grid; None (the stock operator) for other inputs."""
    if image.ndim != 4 or not image.is_floating_point():
        return None
    batch, channels, height, width = image.shape
    out_h, out_w = _pair(output_size)
    if (out_h, out_w) == (height, width):
        return None
    rows = pooling_matrix(height, out_h, image)  # (h, H)
    cols = pooling_matrix(width, out_w, image)  # (w, W)
    weights = (rows[:, None, :, None] * cols[None, :, None, :]).reshape(
        out_h * out_w, height * width)
    # (B, H·W, C): a view where the map is the channels-last view of tokens.
    tokens = image.permute(0, 2, 3, 1).reshape(batch, height * width,
                                               channels)
    pooled = matmul(weights.expand(batch, *weights.shape), tokens)
    return pooled.transpose(1, 2).reshape(batch, channels, out_h, out_w)


def concatenation(tensors: Sequence[torch.Tensor],
                  dim: int = 0) -> Optional[torch.Tensor]:
    """``cat`` of more than :data:`CONCAT_INPUTS` tensors as a balanced tree
    of ``cat`` calls of at most that many; None (the stock operator) for a
    shorter one."""
    parts = list(tensors)
    if len(parts) <= CONCAT_INPUTS:
        return None
    while len(parts) > CONCAT_INPUTS:
        groups = [
            parts[start:start + CONCAT_INPUTS]
            for start in range(0, len(parts), CONCAT_INPUTS)
        ]
        parts = [
            group[0] if len(group) == 1 else torch.cat(group, dim)
            for group in groups
        ]
    return torch.cat(parts, dim)


# The operators rewritten, each with its form.
XNNPACK_FORMS: Dict[torch._ops.OpOverload, Callable] = {
    aten.scaled_dot_product_attention.default: softmax_attention,
    aten.conv2d.default: conv2d,
    aten.matmul.default: matmul,
    aten.mean.dim: token_mean,
    aten.var.correction: token_variance,
    aten.var.dim: token_variance_unbiased,
    aten.cat.default: concatenation,
    aten.adaptive_avg_pool2d.default: adaptive_average_pool,
}
# What a rewritten node passes on to the nodes of its form: the module it
# was traced in (the int8 quantizer's float parts are chosen by it) and the
# operator an export form made it from.
_INHERITED_META = ('nn_module_stack', 'source_fn_stack', 'original_aten',
                   'stack_trace', 'from_node', 'torch_fn')


def _significant_strides(tensor: torch.Tensor) -> List[int]:
    return [s for s, n in zip(tensor.stride(), tensor.shape) if n > 1]


def _in_layout(tensor: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``tensor`` with the strides of ``like`` (a dense layout), copied
    where they differ.

    The nodes after a rewritten one were traced with its original output:
    a ``view`` there may hold only for that layout (SDPA's output, whose
    heads' transpose is contiguous)."""
    if _significant_strides(tensor) == _significant_strides(like):
        return tensor
    order = sorted(range(like.ndim), key=lambda d: -like.stride()[d])
    inverse = [order.index(d) for d in range(like.ndim)]
    return tensor.permute(order).contiguous().permute(inverse)


def _traced_form(node: fx.Node, form: Callable
                 ) -> Optional[Tuple[fx.Graph, List[fx.Node]]]:
    """``form`` applied to ``node``'s arguments, traced into a graph whose
    placeholders are the node's tensor inputs, its output in the node's
    layout; with those inputs, in the placeholders' order. None where the
    form leaves the node to the stock operator."""
    flat, spec = pytree.tree_flatten((node.args, node.kwargs))
    inputs = [a for a in flat if isinstance(a, fx.Node)]

    def call(*tensors):
        values = iter(tensors)
        args, kwargs = pytree.tree_unflatten(
            [next(values) if isinstance(a, fx.Node) else a for a in flat],
            spec)
        out = form(*args, **kwargs)
        return None if out is None else _in_layout(out, node.meta['val'])

    fakes = [a.meta['val'] for a in inputs]
    with detect_fake_mode(fakes):
        if call(*fakes) is None:
            return None
        # pre_dispatch keeps conv2d a conv2d, as the quantizer wants it.
        graph = make_fx(call, pre_dispatch=True)(*fakes).graph
    # A form makes its constants with operators (full, slices of weights),
    # never as tensors the traced graph would hold as attributes.
    assert not any(n.op == 'get_attr' for n in graph.nodes), form
    return graph, inputs


def apply_xnnpack_forms(
    program: torch.export.ExportedProgram,
    forms: Mapping[torch._ops.OpOverload, Callable] = XNNPACK_FORMS
) -> torch.export.ExportedProgram:
    """Rewrite the nodes of ``forms``' operators whose form applies, in
    place.

    Run it before ExecuTorch's ``constant_prop_pass``, which folds the
    forms' constants (the ``1/N`` rows, the kernel tiles).

    Args:
        program (ExportedProgram): Our operators already in their export
            forms (:func:`mmlaplacian.ops.export_decompositions`).
        forms (Mapping): ``{operator: form}``; :data:`XNNPACK_FORMS` by
            default (a program exported with our ExecuTorch kernels adds
            theirs).

    Returns:
        ExportedProgram: ``program``.
    """
    graph = program.graph_module.graph
    # A worklist, so that operators a form writes (softmax attention's
    # matmul) get their own forms too.
    pending = list(reversed(graph.nodes))
    while pending:
        node = pending.pop()
        form = forms.get(node.target) if (
            node.op == 'call_function') else None
        found = None if form is None else _traced_form(node, form)
        if found is None:
            continue
        traced, inputs = found
        placeholders: List[fx.Node] = [
            n for n in traced.nodes if n.op == 'placeholder'
        ]
        computed = sum(n.op == 'call_function' for n in traced.nodes)
        with graph.inserting_before(node):
            out = graph.graph_copy(traced, dict(zip(placeholders, inputs)))
        # The form's nodes lie just before the node they replace.
        new = node.prev
        for _ in range(computed):
            for key in _INHERITED_META:
                if key in node.meta:
                    new.meta.setdefault(key, node.meta[key])
            pending.append(new)
            new = new.prev
        node.replace_all_uses_with(out)
        graph.erase_node(node)
    graph.lint()
    program.graph_module.recompile()
    return program
