"""LaplacianFormer backbone: shapes, gradients, freezing, checkpoints."""
import copy
import os

import pytest
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from mmlaplacian.models import LaplacianFormer
from mmlaplacian.models.layers import FFN, ConvBNReLU
from mmlaplacian.models.checkpoint import filter_backbone_state_dict

ARCHS = ['tiny', 'small', 'medium', 'large', 'huge']


def _tiny(**kwargs) -> LaplacianFormer:
    torch.manual_seed(0)
    model = LaplacianFormer('tiny', drop_path_rate=0., **kwargs)
    model.init_weights()
    return model


@pytest.mark.parametrize('arch', ARCHS)
def test_every_variant_gives_four_strided_outputs(arch):
    model = LaplacianFormer(arch).eval()
    channels = LaplacianFormer.arch_zoo[arch]['embed_dims']
    with torch.no_grad():
        outs = model(torch.rand(1, 3, 67, 93))
    expected_hw = [(17, 24), (9, 12), (5, 6), (3, 3)]
    assert [tuple(o.shape) for o in outs] == [
        (1, c, h, w) for c, (h, w) in zip(channels, expected_hw)
    ]


@pytest.mark.parametrize('size', [(112, 137), (511, 511), (32, 32), (64, 200)])
def test_tiny_any_input_size(size):
    model = _tiny().eval()
    with torch.no_grad():
        outs = model(torch.rand(2, 3, *size))
    for stage, out in enumerate(outs):
        stride = 2**(stage + 2)
        # Each stride-2 conv (padding 1) gives ceil(size / 2).
        h, w = size
        for _ in range(stage + 2):
            h, w = (h + 1) // 2, (w + 1) // 2
        assert out.shape[-2:] == (h, w), (stride, out.shape)
        assert torch.isfinite(out).all()


def test_out_indices_select_stages():
    model = LaplacianFormer('tiny', out_indices=(1, 3)).eval()
    outs = model(torch.rand(1, 3, 64, 64))
    assert [o.shape[1] for o in outs] == [128, 512]
    assert [stage.norm is not None for stage in model.stages] == [
        False, True, False, True]


def test_every_parameter_gets_a_gradient():
    model = _tiny(attn_cfg=dict(learnable_lam=True, share_qk=False)).train()
    outs = model(torch.rand(2, 3, 96, 80))
    sum(o.square().mean() for o in outs).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert missing == []


@pytest.mark.parametrize('frozen_stages', [0, 2])
def test_frozen_stages_freeze_exactly_what_they_say(frozen_stages):
    model = _tiny(frozen_stages=frozen_stages)
    model.train()
    frozen_prefixes = ('stages.0.downsample.', ) if frozen_stages == 0 else \
        tuple(f'stages.{i}.' for i in range(frozen_stages))
    for name, param in model.named_parameters():
        assert param.requires_grad == (not name.startswith(frozen_prefixes)), \
            name
    assert not model.stages[0].downsample.training
    assert model.stages[frozen_stages].blocks.training
    assert model.stages[3].training
    before = copy.deepcopy(model.state_dict())
    # Adam moves every parameter with a non-zero gradient by about lr.
    opt = torch.optim.Adam(
        [p for p in model.parameters() if p.requires_grad], lr=1e-3)
    sum(o.square().mean() for o in model(torch.rand(2, 3, 64, 64))).backward()
    opt.step()
    after = model.state_dict()
    moved = []
    for key in before:
        same = torch.equal(before[key], after[key])
        # BN running stats of frozen stages must not move either.
        if key.startswith(frozen_prefixes):
            assert same, key
        elif not same:
            moved.append(key)
    # Every trainable tensor of the unfrozen stages did move.
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and trainable <= set(moved), sorted(trainable -
                                                          set(moved))[:5]


def test_norm_eval_keeps_batchnorm_in_eval():
    model = _tiny(norm_eval=True).train()
    bns = [m for m in model.modules() if isinstance(m, _BatchNorm)]
    assert bns and all(not m.training for m in bns)
    assert model.stages[0].training


def test_with_cp_same_outputs_and_gradients():
    x = torch.rand(2, 3, 64, 72)
    grads = []
    outputs = []
    for with_cp in (False, True):
        model = _tiny(with_cp=with_cp).train()
        outs = model(x)
        sum(o.square().mean() for o in outs).backward()
        outputs.append(outs)
        grads.append({n: p.grad for n, p in model.named_parameters()})
    for a, b in zip(*outputs):
        torch.testing.assert_close(a, b)
    for name in grads[0]:
        torch.testing.assert_close(
            grads[0][name], grads[1][name], rtol=1e-5, atol=1e-6)


def test_train_and_eval_differ_only_by_batchnorm_and_dropout():
    """Per-sample whitening: no train/eval difference of its own. BatchNorm
    (batch statistics) and DropPath do differ, so the check can fail."""
    x = torch.rand(2, 3, 64, 64)
    model = _tiny()
    model.train()
    train_outs = model(x)
    eval_outs = model.eval()(x)
    assert any(not torch.allclose(a, b) for a, b in zip(train_outs,
                                                        eval_outs))
    model = _tiny(norm_eval=True)
    model.train()
    train_outs = model(x)
    eval_outs = model.eval()(x)
    for a, b in zip(train_outs, eval_outs):
        torch.testing.assert_close(a, b)
    stochastic = LaplacianFormer('tiny', drop_path_rate=0.5, norm_eval=True)
    stochastic.train()
    torch.manual_seed(3)
    first = stochastic(x)
    torch.manual_seed(4)
    second = stochastic(x)
    assert not torch.allclose(first[-1], second[-1])


@pytest.mark.parametrize('layout', [
    'plain', 'state_dict', 'state_dict_ema', 'model', 'module', 'backbone'
])
def test_pretrained_round_trip(tmp_path, layout):
    source = _tiny()
    state = source.state_dict()
    if layout == 'plain':
        ckpt = state
    elif layout == 'module':
        ckpt = {'state_dict': {'module.' + k: v for k, v in state.items()}}
    elif layout == 'backbone':
        ckpt = {
            'state_dict': {
                **{'backbone.' + k: v for k, v in state.items()},
                'head.fc.weight': torch.zeros(10, 512),
            },
            'meta': {}
        }
    else:
        ckpt = {layout: state}
    path = tmp_path / 'ckpt.pth'
    torch.save(ckpt, path)
    torch.manual_seed(1)
    target = LaplacianFormer(
        'tiny', init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    target.init_weights()
    for key, value in state.items():
        torch.testing.assert_close(target.state_dict()[key], value,
                                   msg=key)


def test_position_embeddings_are_resized_on_load(tmp_path):
    source = LaplacianFormer('tiny', pretrain_img_size=384)
    path = tmp_path / 'ckpt384.pth'
    torch.save(source.state_dict(), path)
    target = LaplacianFormer(
        'tiny', init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    target.init_weights()
    assert target.stages[0].pos_embed.shape == (1, 64, 56, 56)
    expected = torch.nn.functional.interpolate(
        source.stages[0].pos_embed.detach(), size=(56, 56), mode='bilinear',
        align_corners=False)
    torch.testing.assert_close(target.stages[0].pos_embed.detach(), expected)


def test_checkpoint_filter_is_idempotent():
    state = _tiny().state_dict()
    wrapped = {'state_dict_ema': {'module.backbone.' + k: v
                                  for k, v in state.items()}}
    once = filter_backbone_state_dict(wrapped)
    twice = filter_backbone_state_dict(once)
    assert list(once) == list(twice) == list(state)


def test_bad_checkpoints_and_archs_name_the_problem(tmp_path):
    text = tmp_path / 'notes.txt'
    text.write_text('not a checkpoint')
    model = LaplacianFormer(
        'tiny', init_cfg=dict(type='Pretrained', checkpoint=str(text)))
    with pytest.raises(RuntimeError, match='notes.txt'):
        model.init_weights()
    missing = LaplacianFormer(
        'tiny', init_cfg=dict(type='Pretrained',
                              checkpoint=str(tmp_path / 'absent.pth')))
    with pytest.raises(FileNotFoundError, match='absent.pth'):
        missing.init_weights()
    foreign = tmp_path / 'foreign.pth'
    torch.save({'state_dict': {'fc.weight': torch.zeros(2, 2)}}, foreign)
    with pytest.raises(RuntimeError, match='no tensor matches'):
        LaplacianFormer('tiny', init_cfg=dict(
            type='Pretrained', checkpoint=str(foreign))).init_weights()
    with pytest.raises(KeyError, match='gigantic'):
        LaplacianFormer('gigantic')
    with pytest.raises(KeyError, match='embed_dims'):
        LaplacianFormer(dict(depths=[1, 1, 1, 1]))
    with pytest.raises(ValueError, match='out_indices'):
        LaplacianFormer('tiny', out_indices=(4, ))
    with pytest.raises(ValueError, match=r'\(B, 3, H, W\)'):
        LaplacianFormer('tiny')(torch.rand(1, 1, 32, 32))


@pytest.mark.parametrize('kwargs,error,match', [
    (dict(arch=dict(embed_dims=[64, 128, 320, 512], depths=[1, 2, 3, 2],
                    num_heads=[2, 4, 7, 16])), ValueError, '320 % 7'),
    (dict(arch=dict(embed_dims=[64, 128, 320], depths=[1, 2, 3],
                    num_heads=[2, 4, 10])), ValueError, 'needs 4 entries'),
    (dict(conv_kernel_sizes=(9, 5)), ValueError, 'conv_kernel_sizes'),
    (dict(frozen_stages=5), ValueError, 'frozen_stages'),
    (dict(out_indices=()), ValueError, 'out_indices'),
    (dict(drop_path_rate=1.5), ValueError, 'drop_path_rate'),
    (dict(attn_cfg=dict(eps=-0.01)), ValueError, 'eps must be >= 0'),
    (dict(attn_cfg=dict(whiten_eps=-1.)), ValueError, 'whiten_eps'),
    (dict(attn_cfg=dict(kernel='cosine')), ValueError, 'kernel'),
])
def test_bad_settings_name_the_problem(kwargs, error, match):
    with pytest.raises(error, match=match):
        LaplacianFormer(**kwargs)


def test_bad_inputs_name_the_problem():
    model = LaplacianFormer('tiny').eval()
    with pytest.raises(ValueError, match='empty batch'):
        model(torch.rand(0, 3, 64, 64))
    for dtype in (torch.float16, torch.bfloat16):
        with pytest.raises(TypeError, match=str(dtype)):
            model(torch.rand(1, 3, 64, 64, dtype=dtype))
    # Under autocast a half-precision input is what the user asked for.
    with torch.autocast('cpu', dtype=torch.bfloat16), torch.no_grad():
        outs = model(torch.rand(1, 3, 64, 64, dtype=torch.bfloat16))
    assert all(torch.isfinite(o.float()).all() for o in outs)


def test_custom_arch_dict():
    arch = dict(embed_dims=[32, 64, 96, 128], depths=[1, 1, 1, 1],
                num_heads=[1, 2, 3, 4])
    outs = LaplacianFormer(arch).eval()(torch.rand(1, 3, 64, 64))
    assert [o.shape[1] for o in outs] == [32, 64, 96, 128]


def test_registered_in_mmdet_and_mmpretrain():
    from mmdet.registry import MODELS as DET_MODELS
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS as CLS_MODELS
    for scope, registry in (('mmdet', DET_MODELS), ('mmpretrain',
                                                    CLS_MODELS)):
        with DefaultScope.overwrite_default_scope(scope):
            for type_name in ('LaplacianFormer',
                              'mmlaplacian.LaplacianFormer'):
                model = registry.build(dict(type=type_name, arch='tiny'))
                assert isinstance(model, LaplacianFormer)


def test_layers_import_torch_and_our_ops_only():
    import ast
    import os.path as osp

    import mmlaplacian.models.layers as layers
    folder = osp.dirname(layers.__file__)
    allowed = ('__future__', 'typing', 'math', 'torch', 'mmlaplacian.ops')
    for name in sorted(os.listdir(folder)):
        if not name.endswith('.py'):
            continue
        with open(osp.join(folder, name)) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                modules = [node.module]
            else:
                continue
            for module in modules:
                assert module.split('.')[0] in allowed or module.startswith(
                    allowed), f'{name} imports {module}'


def test_conv_bn_relu_is_mmcv_conv_module_by_keys_init_and_output():
    from mmcv.cnn import ConvModule
    torch.manual_seed(3)
    ours = ConvBNReLU(8, 16, stride=2)
    torch.manual_seed(3)
    theirs = ConvModule(8, 16, 3, stride=2, padding=1,
                        norm_cfg=dict(type='BN'), act_cfg=dict(type='ReLU'))
    _assert_same_state(ours, theirs)
    for module in theirs.modules():
        if isinstance(module, _BatchNorm):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 8, 15, 12)
    torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=0)
    ours.eval()
    theirs.eval()
    torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=0)


def test_ffn_and_drop_path_are_mmcv_ones_by_keys_init_and_output():
    from mmcv.cnn.bricks.transformer import FFN as MMCVFFN
    torch.manual_seed(3)
    ours = FFN(16, 64, ffn_drop=0.2, drop_path=0.3)
    torch.manual_seed(3)
    theirs = MMCVFFN(16, 64, act_cfg=dict(type='GELU'), ffn_drop=0.2,
                     dropout_layer=dict(type='DropPath', drop_prob=0.3))
    _assert_same_state(ours, theirs)
    x = torch.randn(8, 5, 16)
    for training in (True, False):
        ours.train(training)
        theirs.train(training)
        torch.manual_seed(4)
        expected = theirs(x, identity=x + 1)
        torch.manual_seed(4)  # the same dropout and DropPath draws
        torch.testing.assert_close(ours(x, identity=x + 1), expected,
                                   rtol=0, atol=0)


def _assert_same_state(ours: torch.nn.Module, theirs: torch.nn.Module):
    """Same keys in the same order, and the same seeded values."""
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for key, value in theirs.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
