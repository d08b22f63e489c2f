"""The XNNPACK forms of softmax attention, large depthwise convolutions,
batched products, means and variances over the tokens, adaptive average
pooling and long concatenations: the same values
as the stock operators in double precision, None for the cases they leave
to the stock operator, and the same outputs once applied to an exported
program; lowered to ExecuTorch, none of the operators they exist to avoid
is left to the portable kernels."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from mmlaplacian.models.layers import SoftmaxAttention
from mmlaplacian.models.layers.landmarks import pool_landmarks
from mmlaplacian.ops import export_decompositions
from torch.fx.experimental.proxy_tensor import make_fx

from mmlaplacian.deployment.xnnpack_forms import (CONCAT_INPUTS,
                                                  DEPTHWISE_TAPS,
                                                  adaptive_average_pool,
                                                  apply_xnnpack_forms,
                                                  concatenation, conv2d,
                                                  matmul, softmax_attention,
                                                  token_mean, token_variance,
                                                  token_variance_unbiased)

aten = torch.ops.aten


def _double(*shape, seed=0):
    return torch.randn(*shape, dtype=torch.float64,
                       generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize('kernel,padding,channels,size', [
    (9, 4, 8, (13, 17)),  # stage 1 of LaplacianFormer-T: 9x9, 'same'
    (7, 3, 5, (11, 6)),
    (9, 0, 4, (12, 15)),  # no padding: the output shrinks
    (6, 2, 3, (9, 9)),  # even kernel
    (11, 5, 2, (5, 4)),  # kernel larger than the image
])
@pytest.mark.parametrize('bias', [True, False])
def test_tiled_depthwise_convolution_equals_conv2d(kernel, padding, channels,
                                                   size, bias):
    image = _double(2, channels, *size)
    weight = _double(channels, 1, kernel, kernel, seed=1)
    shift = _double(channels, seed=2) if bias else None
    expected = F.conv2d(image, weight, shift, padding=padding,
                        groups=channels)
    got = conv2d(image, weight, shift, [1], [padding], [1], channels)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_tiled_depthwise_convolution_gradients():
    image = _double(1, 2, 7, 8).requires_grad_()
    weight = _double(2, 1, 7, 7, seed=1).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, w: conv2d(x, w, None, [1, 1], [3, 3], [1, 1], 2),
        (image, weight))


@pytest.mark.parametrize('stride,groups,kernel', [
    (2, 4, 9),  # strided: the stock operator
    (1, 1, 9),  # dense
    (1, 4, 5),  # 25 taps: XNNPACK's own depthwise kernel
])
def test_other_convolutions_are_left_to_the_stock_operator(
        stride, groups, kernel):
    image = _double(1, 4, 12, 12)
    weight = _double(4, 4 // groups, kernel, kernel, seed=1)
    assert conv2d(image, weight, None, [stride], [kernel // 2], [1],
                  groups) is None


def test_softmax_attention_equals_sdpa():
    q, k, v = (_double(2, 3, 10, 8, seed=s) for s in range(3))
    torch.testing.assert_close(softmax_attention(q, k, v),
                               F.scaled_dot_product_attention(q, k, v),
                               rtol=0, atol=1e-12)
    torch.testing.assert_close(
        softmax_attention(q, k, v, scale=0.3),
        F.scaled_dot_product_attention(q, k, v, scale=0.3), rtol=0,
        atol=1e-12)


@pytest.mark.parametrize('variant', ['bool mask', 'float mask', 'causal'])
def test_masked_attention_is_left_to_the_stock_operator(variant):
    """A mask can hide a whole row: that case keeps torch's own form."""
    q, k, v = (_double(1, 2, 6, 4, seed=s) for s in range(3))
    mask = torch.rand(6, 6, generator=torch.Generator().manual_seed(3)) > .4
    mask[2] = False  # a row with nothing to attend to
    kwargs = {
        'bool mask': dict(attn_mask=mask),
        'float mask': dict(attn_mask=torch.zeros(
            6, 6, dtype=torch.float64).masked_fill(~mask, float('-inf'))),
        'causal': dict(is_causal=True),
    }[variant]
    assert softmax_attention(q, k, v, **kwargs) is None


@pytest.mark.parametrize('left,right', [
    ((2, 3, 5, 4), (2, 3, 4, 6)),  # equal batch: bmm, no expand
    ((3, 5, 4), (4, 6)),  # 2-D right operand: one mm
    ((2, 1, 5, 4), (2, 3, 4, 6)),  # broadcast batch
    ((5, 4), (2, 4, 6)),
    ((4, ), (2, 3, 4, 6)),
    ((2, 5, 4), (4, )),
    ((4, ), (4, )),
])
def test_matmul_equals_torch_matmul(left, right):
    a, b = _double(*left), _double(*right, seed=1)
    got, expected = matmul(a, b), torch.matmul(a, b)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize('shape', [(7, 3), (2, 13, 5), (1, 2, 31, 49)])
@pytest.mark.parametrize('keepdim', [True, False])
def test_token_mean_equals_mean(shape, keepdim):
    x = _double(*shape)
    for dim in ([-2], [len(shape) - 2]):
        got = token_mean(x, dim, keepdim)
        expected = x.mean(dim, keepdim=keepdim)
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize('shape', [(7, 3), (2, 13, 5), (1, 2, 31, 49)])
@pytest.mark.parametrize('correction', [None, 0, 1, 2])
@pytest.mark.parametrize('keepdim', [True, False])
def test_token_variance_equals_var(shape, correction, keepdim):
    # An offset far from zero: the two-pass form keeps its precision.
    x = 1e3 + _double(*shape)
    got = token_variance(x, [-2], correction=correction, keepdim=keepdim)
    expected = torch.var(x, -2, correction=correction, keepdim=keepdim)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=0)
    torch.testing.assert_close(
        token_variance_unbiased(x, [-2], correction != 0, keepdim),
        x.var(-2, unbiased=correction != 0, keepdim=keepdim), rtol=1e-10,
        atol=0)


def test_token_variance_gradients():
    x = _double(2, 9, 4).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda t: token_variance(t, [1], correction=0), (x, ))


@pytest.mark.parametrize('case', [
    lambda x: token_mean(x, [-1]),
    lambda x: token_mean(x, [1, 2], True),
    lambda x: token_mean(x, None),
    lambda x: token_mean(x, [-2], dtype=torch.float32),
    lambda x: token_mean(x.long(), [-2]),
    lambda x: token_variance(x, [-1]),
    lambda x: token_variance(x[:, :1], [-2], correction=1),  # divisor 0
    lambda x: token_variance_unbiased(x, [0]),
])
def test_other_reductions_are_left_to_the_stock_operator(case):
    assert case(_double(2, 5, 3)) is None


@pytest.mark.parametrize('count,levels', [(6, 2), (25, 2), (26, 3),
                                          (101, 3), (126, 4)])
@pytest.mark.parametrize('dim', [1, -1])
def test_long_concatenation_is_a_balanced_tree(count, levels, dim):
    """Equal to ``cat``, in ``cat``s of at most 5 inputs that copy each
    element once per level: ExecuTorch's own split, a chain, copies what
    every earlier link joined again."""
    parts = [_double(2, 3, index % 4 + 1, seed=index) for index in range(count)]
    if dim == 1:
        parts = [p.transpose(1, 2) for p in parts]  # non-contiguous inputs
    expected = torch.cat(parts, dim)
    assert torch.equal(concatenation(parts, dim), expected)
    graph = make_fx(lambda *t: concatenation(t, dim))(*parts).graph
    cats = [n for n in graph.nodes if n.target == aten.cat.default]
    assert max(len(n.args[0]) for n in cats) <= CONCAT_INPUTS
    copied = sum(n.meta['val'].numel() for n in cats)
    assert copied <= levels * expected.numel()
    assert copied > (levels - 1) * expected.numel()


def test_short_concatenation_is_left_to_the_stock_operator():
    parts = [_double(2, 3, seed=index) for index in range(CONCAT_INPUTS)]
    assert concatenation(parts, 0) is None


@pytest.mark.parametrize('size,grid', [
    ((48, 48), (7, 7)),  # stage 1 of LaplacianFormer-T at 192x192
    ((13, 9), (7, 7)),  # bins of unequal widths, wider than the grid
    ((5, 11), (3, 4)),
    ((6, 6), (7, 7)),  # more bins than rows: bins overlap
])
@pytest.mark.parametrize('channels_last', [True, False])
def test_adaptive_average_pool_equals_the_operator(size, grid,
                                                   channels_last):
    tokens = _double(2, size[0] * size[1], 5)
    image = (tokens.reshape(2, *size, 5).permute(0, 3, 1, 2)
             if channels_last else _double(2, 5, *size))
    got = adaptive_average_pool(image, grid)
    torch.testing.assert_close(got, F.adaptive_avg_pool2d(image, grid),
                               rtol=0, atol=1e-12)


def test_adaptive_average_pool_gradients():
    image = _double(1, 3, 7, 5).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x: adaptive_average_pool(x, [3, 2]), (image, ))


@pytest.mark.parametrize('image,grid', [
    (_double(2, 3, 7, 7), (7, 7)),  # the grid is the image: no pooling
    (_double(3, 7, 7), (2, 2)),  # unbatched
    (torch.ones(1, 2, 6, 6, dtype=torch.int64), (3, 3)),
])
def test_other_poolings_are_left_to_the_stock_operator(image, grid):
    assert adaptive_average_pool(image, grid) is None


class _Parts(nn.Module):
    """A 9x9 depthwise convolution, the last stage's softmax attention, a
    batched product, moments over the tokens, landmarks pooled onto a 7x7
    grid and a concatenation of 6 row blocks: each form's case; and a mean
    over the image, which XNNPACK takes as it is."""

    def __init__(self):
        super().__init__()
        self.dwconv = nn.Conv2d(8, 8, 9, padding=4, groups=8)
        self.mix = nn.Conv2d(8, 8, 1)
        # Its heads are a view of one projection, and SDPA's output keeps
        # that layout, on which the merge of the heads after it relies.
        self.attn = SoftmaxAttention(8, num_heads=2)

    def forward(self, image):
        x = self.mix(self.dwconv(image))  # (1, 8, H, W)
        attended = self.attn(x.flatten(2).transpose(1, 2))  # (1, N, 8)
        heads = attended.reshape(1, -1, 2, 4).transpose(1, 2)
        gram = heads.transpose(-1, -2) @ heads  # (1, 2, 4, 4)
        moments = (heads.mean(-2, keepdim=True) +
                   heads.var(-2, unbiased=False, keepdim=True))
        blocks = torch.cat([part.exp() for part in attended.split(20, 1)], 1)
        landmarks = pool_landmarks(attended, image.shape[-2:], (7, 7), 2)
        return (attended, gram, moments, x.mean((2, 3), keepdim=True), blocks,
                landmarks)


def _with_forms(module, image):
    """The program as ``export_executorch`` rewrites it: decomposed first
    (our operators' forms; ``reshape`` becomes ``view`` where the traced
    layout allows), then the XNNPACK forms."""
    with torch.no_grad():
        program = torch.export.export(module.eval(), (image, ))
    return apply_xnnpack_forms(
        program.run_decompositions(export_decompositions()))


def test_forms_replace_the_operators_in_an_exported_program():
    torch.manual_seed(0)
    module, image = _Parts(), torch.randn(1, 8, 10, 12)
    program = _with_forms(module, image)
    calls = [n for n in program.graph.nodes if n.op == 'call_function']
    targets = [node.target for node in calls]
    for absent in (aten.scaled_dot_product_attention.default,
                   aten.matmul.default, aten.var.dim, aten.var.correction,
                   aten.adaptive_avg_pool2d.default):
        assert absent not in targets
    # 120 tokens in 6 blocks: a cat of 5, then one of it and the sixth.
    cats = [n for n in calls if n.target == aten.cat.default]
    assert sorted(len(n.args[0]) for n in cats) == [2, 5]
    # The mean over the image is XNNPACK's own: left as it was.
    means = [n.args[1] for n in calls if n.target == aten.mean.dim]
    assert means == [[2, 3]]
    # The nodes of each form keep the module they were traced in, by which
    # the int8 quantizer's float parts are chosen.
    assert all('nn_module_stack' in node.meta for node in calls)
    kernels = [
        node.args[1].meta['val'].shape for node in calls
        if node.target == aten.conv2d.default
    ]
    # The 9x9 kernel as four 5x5 tiles, and the 1x1 mix.
    assert sorted(k[-2] * k[-1] for k in kernels) == [1] + [25] * 4
    assert max(k[-2] * k[-1] for k in kernels) <= DEPTHWISE_TAPS
    # Traced again, as lowering does: the nodes after a form still hold.
    program = program.run_decompositions()
    with torch.no_grad():
        for got, expected in zip(program.module()(image), module(image)):
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_lowered_forms_leave_nothing_they_avoid_to_the_portable_kernels(
        tmp_path):
    pytest.importorskip('executorch')
    from mmlaplacian.deployment.executorch_export import (export_executorch,
                                                          run_executorch)
    torch.manual_seed(0)
    module, image = _Parts().eval(), torch.randn(1, 8, 10, 12)
    result = export_executorch(module, image, str(tmp_path / 'parts.pte'))
    portable = set(result.portable_ops)
    for avoided in ('where', 'eq', 'any', 'logical_not', 'full_like',
                    'expand_copy', 'convolution', 'mean', 'var',
                    '_adaptive_avg_pool2d'):
        assert not any(op.startswith(avoided) for op in portable), portable
    with torch.no_grad():
        expected = module(image)
    for got, ref in zip(run_executorch(result.path, [image]), expected):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_int8_program_quantizes_the_tiles(tmp_path):
    """The tiles are convolutions the XNNPACK quantizer takes: asked to
    quantize everything it takes (no float parts), int8 runs the 9x9
    depthwise convolution as four int8 5x5 ones, in a program that XNNPACK
    loads and that follows eager float32."""
    pytest.importorskip('executorch')
    from mmlaplacian.deployment.executorch_export import (export_executorch,
                                                          run_executorch)
    torch.manual_seed(0)
    module = _Parts().eval()
    images = [(torch.randn(1, 8, 10, 12), ) for _ in range(2)]
    result = export_executorch(module, images[0], str(tmp_path / 'q.pte'),
                               quantize='int8', calibration=images,
                               float_parts=())
    assert result.quantized['conv2d'] == 5, result.quantized
    assert 'conv2d' not in result.float_ops, result.float_ops
    with torch.no_grad():
        expected = module(*images[1])
    for got, ref in zip(run_executorch(result.path, list(images[1])),
                        expected):
        assert torch.corrcoef(torch.stack([got.flatten(),
                                           ref.flatten()]))[0, 1] >= 0.99
