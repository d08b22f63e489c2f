"""LaplacianFormer backbone: shapes, gradients, freezing, checkpoints."""
import copy

import pytest
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from mmlaplacian.models import LaplacianFormer
from mmlaplacian.models.utils import filter_backbone_state_dict

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
    assert not hasattr(model, 'norm0') and hasattr(model, 'norm3')


def test_every_parameter_gets_a_gradient():
    model = _tiny(attn_cfg=dict(learnable_lam=True, share_qk=False)).train()
    outs = model(torch.rand(2, 3, 96, 80))
    sum(o.square().mean() for o in outs).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert missing == []


def test_frozen_stages_freeze_exactly_what_they_say():
    model = _tiny(frozen_stages=2)
    model.train()
    frozen_prefixes = ('stem.', 'stages.0.', 'stages.1.', 'downsamples.0.',
                       'norm0.', 'norm1.', 'pos_embeds.0', 'pos_embeds.1')
    for name, param in model.named_parameters():
        assert param.requires_grad == (not name.startswith(frozen_prefixes)), \
            name
    assert not model.stem.training and not model.stages[1].training
    assert model.stages[2].training and model.downsamples[1].training
    before = copy.deepcopy(model.state_dict())
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad],
                          lr=0.1)
    sum(o.mean() for o in model(torch.rand(2, 3, 64, 64))).backward()
    opt.step()
    after = model.state_dict()
    for key in before:
        same = torch.equal(before[key], after[key])
        # BN running stats of frozen stages must not move either.
        if key.startswith(frozen_prefixes):
            assert same, key


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


def test_train_and_eval_outputs_match_without_dropout():
    model = _tiny(norm_eval=True)
    x = torch.rand(1, 3, 64, 64)
    train_outs = model.train()(x)
    eval_outs = model.eval()(x)
    for a, b in zip(train_outs, eval_outs):
        torch.testing.assert_close(a, b)


def test_inference_paths_match_the_autograd_path():
    """Chunked attention/MLPs and folded BN (no autograd) change no output."""
    torch.manual_seed(0)
    model = LaplacianFormer(
        'tiny', drop_path_rate=0., inference_chunk_tokens=300).eval()
    for module in model.modules():  # non-trivial BN statistics to fold
        if isinstance(module, _BatchNorm):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 150, 211)  # stage 1: 38x53 = 2014 tokens
    reference = [out.detach() for out in model(x)]  # autograd: one pass
    with torch.no_grad():
        fast = model(x)
    for ref, out in zip(reference, fast):
        assert out.is_contiguous()
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


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
    assert target.pos_embeds[0].shape == (1, 64, 56, 56)
    expected = torch.nn.functional.interpolate(
        source.pos_embeds[0].detach(), size=(56, 56), mode='bilinear',
        align_corners=False)
    torch.testing.assert_close(target.pos_embeds[0].detach(), expected)


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
