"""Analytic params/FLOPs against built modules and mmengine's tracer."""
from pathlib import Path

import pytest
import torch

from mmlaplacian.analysis import (attention_module_flops,
                                  backbone_complexity, classifier_complexity,
                                  count_model_flops,
                                  laplacian_attention_flops)
from mmlaplacian.models import LaplacianFormer
from mmlaplacian.models.layers import LaplacianAttention

ROOT = Path(__file__).resolve().parents[2]
ARCHS = ['tiny', 'small', 'medium', 'large', 'huge']
TINY_CFG = ROOT / 'configs/imagenet/lf_tiny_in1k.py'


def _numel(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize('arch', ARCHS)
def test_params_equal_built_backbone(arch):
    model = LaplacianFormer(arch)
    assert backbone_complexity(arch=arch).params == _numel(model)


@pytest.mark.parametrize('cfg', [
    dict(attn_cfg=dict(share_qk=False, learnable_lam=True)),
    dict(attn_cfg=dict(conv_kernel_size=0, qkv_bias=False)),
    dict(conv_kernel_sizes=(7, 5, 1), mlp_ratio=3.0, pretrain_img_size=256),
    dict(stage4_attention='laplacian', linear_attention='softmax',
         out_indices=(1, 3), in_channels=4),
])
def test_params_equal_built_backbone_ablations(cfg):
    arch = dict(embed_dims=[32, 64, 96, 128], depths=[1, 1, 2, 1],
                num_heads=[1, 2, 3, 4])
    model = LaplacianFormer(arch, **cfg)
    assert backbone_complexity(arch=arch, **cfg).params == _numel(model)


def test_unknown_backbone_argument_is_rejected():
    with pytest.raises(TypeError):
        backbone_complexity(arch='tiny', num_landmark=49)


def test_flops_grow_with_the_variant():
    flops = [classifier_complexity((224, 224), arch=a).flops for a in ARCHS]
    assert flops == sorted(flops) and len(set(flops)) == len(flops)
    params = [classifier_complexity(arch=a).params for a in ARCHS]
    assert params == sorted(params)


def _linear_attention_flops(shape, **cfg):
    report = backbone_complexity(shape, arch='tiny', **cfg)
    return sum(report.flops_of(f'stage{i}.attention') for i in (1, 2, 3))


def test_laplacian_attention_is_linear_in_tokens():
    # Twice the pixels at the same aspect ratio (the same landmark grid): the
    # stage 1-3 attention ~doubles; only the m^3 inverse stays constant.
    base, double = (800, 1333), (1131, 1885)
    ratio = _linear_attention_flops(double) / _linear_attention_flops(base)
    assert 1.95 < ratio < 2.0
    # The quadratic reference (softmax in stages 1-3) is not linear.
    ratio = (_linear_attention_flops(double, linear_attention='softmax') /
             _linear_attention_flops(base, linear_attention='softmax'))
    assert ratio > 3.9


def test_attention_terms():
    terms = laplacian_attention_flops((14, 14), 64, 2, num_landmarks=49,
                                      ns_iters=10, conv_kernel_size=3)
    n, m, c = 196, 49, 64
    assert terms == dict(
        linear=3 * n * c * c,
        pool=n * c,
        kernel=n * m * c + m * m * c,
        inverse=2 * 10 * 2 * m**3,
        whiten=4 * 2 * n * m,
        context=2 * n * m * c + m * m * c,
        dwconv=n * c * 9)
    # Tokens are their own landmarks on small grids: no pooling, m = N.
    exact = laplacian_attention_flops((5, 6), 64, 2, share_qk=False)
    assert exact['pool'] == 0
    assert exact['kernel'] == 2 * 30 * 30 * 64 + 30 * 30 * 64
    attn = LaplacianAttention(64, 2, ns_iters=10, conv_kernel_size=3)
    assert attention_module_flops(attn, (14, 14)) == sum(terms.values())


def _baddbmm_flops(inputs, outputs) -> int:
    """MACs of ``baddbmm(bias, (b, n, m), (b, m, d))`` (no mmengine handle)."""
    from mmengine.analysis.jit_handles import get_shape
    batch, rows, inner = get_shape(inputs[1])
    return batch * rows * inner * get_shape(inputs[2])[-1]


def test_traced_attention_parts_match_terms():
    """The parts of the attention the tracer sees match their formulas."""
    from mmengine.analysis import FlopAnalyzer
    attn = LaplacianAttention(64, 2, conv_kernel_size=9).eval()
    analyzer = FlopAnalyzer(attn, (torch.rand(1, 56 * 56, 64), (56, 56)))
    analyzer.unsupported_ops_warnings(False).tracer_warnings('none')
    analyzer.set_op_handle('aten::baddbmm', _baddbmm_flops)
    seen = analyzer.by_operator()
    terms = laplacian_attention_flops((56, 56), 64, 2, conv_kernel_size=9)
    assert seen['linear'] == terms['linear']
    assert seen['conv'] == terms['dwconv']
    assert seen['adaptive_avg_pool2d'] == terms['pool']
    assert seen['matmul'] + seen['baddbmm'] >= terms['context']


@pytest.fixture(scope='module')
def tiny_classifier():
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS
    cfg = Config.fromfile(str(TINY_CFG))
    init_default_scope('mmpretrain')
    return MODELS.build(cfg.model).eval()


@pytest.mark.parametrize('shape', [(224, 224), (160, 200)])
def test_traced_count_matches_analytic(tiny_classifier, shape):
    """Outside the attention, mmengine's tracer and the formulas agree."""
    with torch.no_grad():
        traced = count_model_flops(tiny_classifier,
                                   (torch.rand(1, 3, *shape), ))
    analytic = classifier_complexity(shape, arch='tiny')
    assert traced.params == analytic.params
    assert traced.flops == analytic.flops
    assert traced.attention_analytic == analytic.flops_of('stage1.att') + \
        analytic.flops_of('stage2.att') + analytic.flops_of(
            'stage3.att') + analytic.flops_of('stage4.att')
    # The tracer alone misses the fused kernels and Newton–Schulz.
    assert traced.attention_traced < traced.attention_analytic
    assert traced.flops_by_module['backbone'] + traced.flops_by_module[
        'neck'] + traced.flops_by_module['head'] == traced.flops


def test_get_flops_tool(load_script, capsys):
    tool = load_script('tools/analysis_tools/get_flops.py')
    result = tool.main([str(TINY_CFG), '--shape', '224'])
    assert result.flops == classifier_complexity((224, 224),
                                                 arch='tiny').flops
    out = capsys.readouterr().out
    assert '| backbone |' in out and f'{result.flops / 1e9:.3f}' in out


def test_get_flops_tool_on_a_detector(load_script, capsys):
    pytest.importorskip('mmdet')
    config = ROOT / 'configs/retinanet/lf_tiny_1x.py'
    tool = load_script('tools/analysis_tools/get_flops.py')
    result = tool.main([str(config), '--shape', '120', '150'])
    assert 'input 1x3x128x160' in capsys.readouterr().out  # padded to 32
    backbone_cfg = tool.Config.fromfile(str(config)).model.backbone
    analytic = backbone_complexity(
        (128, 160), arch='tiny', out_indices=backbone_cfg.out_indices)
    assert result.flops_by_module['backbone'] == analytic.flops
    assert set(result.flops_by_module) == {
        'data_preprocessor', 'backbone', 'neck', 'bbox_head'}
    assert result.flops > analytic.flops


def test_complexity_table_tool(load_script, capsys):
    tool = load_script('tools/analysis_tools/model_complexity_table.py')
    table = tool.main(['--shape', '224', '224'])
    rows = [line for line in table.splitlines() if line.startswith('| ')]
    assert [r.split('|')[1].strip() for r in rows[1:]] == ARCHS
    medium = classifier_complexity(arch='medium')
    assert f'{medium.params / 1e6:.2f}' in rows[3]
    assert '7.43' in rows[3]
