"""FLOPs traced from the built model against counts worked out by hand.

Every expected figure below is computed in the test from the shapes (MACs,
mmengine's conventions: LayerNorm 5 and eval BatchNorm 2 per element,
bilinear resizing 4 per output element, pooling 1 per input element); none
is read back from the tool.
"""
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from mmengine.config import Config

from mmlaplacian.models import LaplacianFormer
from mmlaplacian.models.layers import LaplacianAttention, SoftmaxAttention
from mmlaplacian.ops import laplace_kernel, newton_schulz_inverse
from mmlaplacian.utils import flops as flops_module

from benchmarks import model_complexity

ROOT = Path(__file__).resolve().parents[2]
TINY_CFG = ROOT / 'configs/imagenet/lf_tiny_in1k.py'
NS_MACS = 40  # 20 Newton–Schulz steps of 2 m×m×m products


@pytest.fixture(scope='module')
def flops():
    return flops_module


@pytest.fixture(scope='module')
def get_flops(load_script):
    return load_script('tools/analysis_tools/get_flops.py')


class Call(nn.Module):
    """Wraps a function so that the tracer sees a module."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def test_laplace_kernel_counts_n_m_d(flops):
    x, y = torch.rand(3, 50, 8), torch.rand(3, 7, 8)
    result = flops.count_model_flops(
        Call(lambda a, b: laplace_kernel(a, b, impl='pytorch')), (x, y))
    assert result.by_operator == {'laplace_kernel': 3 * 50 * 7 * 8}
    assert not result.uncounted_python_ops


@pytest.mark.parametrize('iters', [3, 20])
def test_newton_schulz_counts_iters_2m3_per_matrix(flops, iters):
    a = torch.eye(6).repeat(5, 1, 1) * 2
    result = flops.count_model_flops(
        Call(lambda m: newton_schulz_inverse(m, iters, impl='pytorch')),
        (a, ))
    assert result.by_operator['newton_schulz'] == iters * 2 * 6**3 * 5
    assert result.newton_schulz_flops == result.flops


def test_softmax_attention_counts_2_n2_c(flops):
    # (B, N, C) = (2, 30, 64) in 4 heads: QKᵀ and PV, N²·C each per sample.
    attn = SoftmaxAttention(64, 4).eval()
    result = flops.count_model_flops(attn, (torch.rand(2, 30, 64), (5, 6)))
    assert result.by_operator['softmax_attention'] == 2 * 2 * 30**2 * 64
    assert result.by_operator['linear'] == 2 * 30 * 4 * 64 * 64


def laplacian_terms(n, c, heads, m, kernel_size, share_qk=True,
                    pooled=True):
    """The Laplacian attention's MACs per sample, by operator."""
    keys = 1 if share_qk else 2
    return dict(
        linear=(2 + keys) * n * c * c,
        adaptive_avg_pool2d=keys * n * c if pooled else 0,
        laplace_kernel=keys * n * m * c + m * m * c,
        newton_schulz=NS_MACS * m**3 * heads,
        whitening_variance=4 * heads * n * m,
        conv=n * c * kernel_size**2,
        # Kkᵀ·V, X·(Kkᵀ V), Z·(X Kkᵀ V)
        context=2 * n * m * c + m * m * c)


def check_attention(by_operator, terms, readout_slack):
    for op, expected in terms.items():
        if op == 'context':
            # A 1×m row per head may be folded into the readout (the
            # whitening's mean): at most m·C more.
            got = by_operator.get('matmul', 0) + by_operator.get('baddbmm', 0)
            assert expected <= got <= expected + readout_slack, op
        else:
            assert by_operator.get(op, 0) == expected, op


@pytest.mark.parametrize('share_qk', [True, False])
def test_laplacian_attention_by_hand(flops, share_qk):
    # 14×16 tokens, 49 landmarks: a 6×8 grid (aspect kept), m = 48.
    attn = LaplacianAttention(64, 2, share_qk=share_qk, conv_kernel_size=3)
    result = flops.count_model_flops(attn.eval(),
                                     (torch.rand(1, 14 * 16, 64), (14, 16)))
    n, c, m = 14 * 16, 64, 48
    check_attention(result.by_operator,
                    laplacian_terms(n, c, 2, m, 3, share_qk), m * c)
    assert not result.uncounted_python_ops


def test_exact_inverse_counts_m3(flops):
    attn = LaplacianAttention(64, 2, inverse='exact').eval()
    result = flops.count_model_flops(attn, (torch.rand(1, 100, 64), (10, 10)))
    m = 49  # 7×7 landmarks
    assert result.by_operator['linalg_inv'] == 2 * m**3
    assert 'newton_schulz' not in result.by_operator


ARCH = dict(embed_dims=[32, 64, 96, 128], depths=[1, 1, 2, 1],
            num_heads=[1, 2, 3, 4])


def backbone_by_hand(height, width):
    """MACs by operator of LaplacianFormer(ARCH) on one image, by hand.

    Stem: 3×3 convs 3→32 (s2), 32→32, 32→C1 (s2), each with BN; stages
    2–4 start with a 3×3 s2 conv + BN. Position embeddings (56/28/14/7
    grids) are resized to the stage's grid; blocks: 2 LayerNorms,
    attention, MLP (ratio 4); every stage is an output (LayerNorm).
    """
    dims, depths, heads = (ARCH['embed_dims'], ARCH['depths'],
                           ARCH['num_heads'])
    ops = dict(conv=0, batch_norm=0, layer_norm=0, linear=0,
               upsample_bilinear2d=0, adaptive_avg_pool2d=0,
               laplace_kernel=0, newton_schulz=0, whitening_variance=0,
               softmax_attention=0, context=0)

    def conv_bn(cin, cout, hw):
        ops['conv'] += 9 * cin * cout * hw[0] * hw[1]
        ops['batch_norm'] += 2 * cout * hw[0] * hw[1]

    half = lambda hw: ((hw[0] + 1) // 2, (hw[1] + 1) // 2)  # noqa: E731
    hw = half((height, width))
    conv_bn(3, 32, hw)
    conv_bn(32, 32, hw)
    hw = half(hw)
    conv_bn(32, dims[0], hw)
    # Landmark grids for 49 landmarks at the 64×96 input of the test:
    # 16×24 -> 5×9, 8×12 -> 5×9, 4×6 = 24 tokens are their own landmarks.
    landmarks = [(45, True), (45, True), (24, False)]
    for i in range(4):
        if i > 0:
            hw = half(hw)
            conv_bn(dims[i - 1], dims[i], hw)
        n, c = hw[0] * hw[1], dims[i]
        ops['upsample_bilinear2d'] += 4 * n * c
        for _ in range(depths[i]):
            ops['layer_norm'] += 2 * 5 * n * c
            ops['linear'] += 2 * n * c * 4 * c  # MLP
            if i == 3:
                ops['linear'] += 4 * n * c * c
                ops['softmax_attention'] += 2 * n * n * c
                continue
            m, pooled = landmarks[i]
            terms = laplacian_terms(n, c, heads[i], m, (9, 5, 3)[i],
                                    pooled=pooled)
            for op, value in terms.items():
                ops[op] += value
        ops['layer_norm'] += 5 * n * c
    return ops


def test_backbone_traced_equals_hand_count(flops):
    model = LaplacianFormer(ARCH, attn_cfg=dict(mode='full')).eval()
    result = flops.count_model_flops(model, (torch.rand(1, 3, 64, 96), ))
    expected = backbone_by_hand(64, 96)
    # Per-row slack of the readout: m·C per Laplacian block.
    slack = 45 * 32 + 45 * 64 + 2 * 24 * 96
    check_attention(result.by_operator, expected, slack)
    assert set(result.by_operator) <= set(expected) | {'matmul', 'baddbmm'}
    assert result.flops == sum(result.by_operator.values())
    assert result.params == sum(p.numel() for p in model.parameters())
    assert not result.uncounted_python_ops


def test_tracing_takes_the_plain_path(flops):
    """The attention's chunked mode must not change what is counted."""
    torch.manual_seed(0)
    image = torch.rand(1, 3, 96, 128)
    counts = []
    for mode in ('full', 'auto'):
        model = LaplacianFormer(
            ARCH, attn_cfg=dict(mode=mode, chunk_tokens=64)).eval()
        counts.append(flops.count_model_flops(model, (image, )).by_operator)
    assert counts[0] == counts[1]


def test_attention_is_linear_in_tokens_stage4_is_not(flops):
    # Four times the pixels at the same aspect ratio (same landmark grids).
    model = LaplacianFormer('tiny', attn_cfg=dict(mode='full')).eval()
    small, large = (flops.count_model_flops(model, (
        torch.rand(1, 3, h, w), )).by_operator
                    for h, w in ((256, 384), (512, 768)))
    # Every stage-1–3 grid is 2:3 here: 5×9 = 45 landmarks; W costs m²·C.
    m2c = sum(45 * 45 * c * d for c, d in zip((64, 128, 320), (1, 2, 3)))
    assert large['laplace_kernel'] - m2c == 4 * (small['laplace_kernel'] -
                                                 m2c)
    assert large['newton_schulz'] == small['newton_schulz']
    assert large['softmax_attention'] == 16 * small['softmax_attention']


def test_get_flops_tool_on_the_classifier(get_flops, capsys):
    result = get_flops.main([str(TINY_CFG), '--shape', '224'])
    # 224 -> 7×7 at stage 4 (512 channels): pooling 512·49, head 512·1000.
    assert result.flops_by_module['neck'] == 512 * 7 * 7
    assert result.flops_by_module['head'] == 512 * 1000
    assert result.params_by_module['head'] == 512 * 1000 + 1000
    assert sum(result.flops_by_module.values()) == result.flops
    assert result.newton_schulz_flops == NS_MACS * 49**3 * (2 + 2 * 4 +
                                                            3 * 10)
    out = capsys.readouterr().out
    assert f'| **total** | **{result.params / 1e6:.2f}** | ' \
        f'**{result.flops / 1e9:.3f}** |' in out
    assert 'newton_schulz 0.188' in out


def test_get_flops_tool_on_a_detector(get_flops, flops, capsys):
    pytest.importorskip('mmdet')
    config = ROOT / 'configs/retinanet/lf_tiny_1x.py'
    result = get_flops.main([str(config), '--shape', '120', '150'])
    assert 'input 1x3x128x160' in capsys.readouterr().out  # padded to 32
    assert set(result.flops_by_module) == {
        'data_preprocessor', 'backbone', 'neck', 'bbox_head'}
    # The backbone alone, built from the config's settings, counts the same.
    backbone_cfg = Config.fromfile(str(config)).model.backbone
    backbone_cfg.pop('type')
    backbone_cfg.pop('init_cfg', None)
    backbone = LaplacianFormer(**backbone_cfg).eval()
    alone = flops.count_model_flops(backbone, (torch.rand(1, 3, 128, 160), ))
    assert result.flops_by_module['backbone'] == alone.flops
    assert result.flops > alone.flops


def test_complexity_table_tool():
    tool = model_complexity
    table = tool.make_table((224, 224), verify=True, archs=('tiny', ))
    header, _, row = [[c.strip() for c in line.strip('|').split('|')]
                      for line in table.splitlines()]
    cells = dict(zip(header, row))
    # The Newton–Schulz column: 49 landmarks in every stage at 224²,
    # 2 + 2·4 + 3·10 head-blocks in stages 1–3 of Tiny.
    inverse = NS_MACS * 49**3 * (2 + 2 * 4 + 3 * 10) / 1e9
    assert float(cells['GFLOPs @224×224']) - float(
        cells['GFLOPs without the Newton–Schulz inverse']) == pytest.approx(
            inverse, abs=0.011)
    model = tool.build_model(tool.read_config(str(TINY_CFG)))[0]
    numel = sum(p.numel() for p in model.parameters())
    assert cells['params (M)'] == f'{numel / 1e6:.2f}'
    assert (cells['arch'], cells['embed dims'], cells['depths'],
            cells['SOFT-like target (M)']) == ('tiny', '64,128,320,512',
                                               '1,2,3,2', '≈13')
