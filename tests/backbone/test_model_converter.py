"""tools/model_converters/laplacianformer_to_mmdet.py."""
import os
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import pytest
import torch

from mmlaplacian.models import LaplacianFormer

ROOT = Path(__file__).resolve().parents[2]
TOOL = 'tools/model_converters/laplacianformer_to_mmdet.py'
DIMS, DEPTHS = [64, 128, 320, 512], [1, 2, 3, 2]  # tiny
GRIDS = [56, 28, 14, 7]


@pytest.fixture(scope='module')
def converter(load_script):
    return load_script(TOOL)


def _linear(prefix, cin, cout):
    return {f'{prefix}.weight': torch.randn(cout, cin),
            f'{prefix}.bias': torch.randn(cout)}


def _norm(prefix, dims):
    return {f'{prefix}.weight': torch.randn(dims),
            f'{prefix}.bias': torch.randn(dims)}


def soft_style_state_dict(seed: int) -> 'OrderedDict':
    """A LaplacianFormer-Tiny-sized checkpoint in PVT-v1 (SOFT) naming."""
    torch.manual_seed(seed)
    state = OrderedDict(cls_token=torch.randn(1, 1, 512))
    cin = 3
    for i, (dims, depth, grid) in enumerate(zip(DIMS, DEPTHS, GRIDS), 1):
        size = 4 if i == 1 else 2
        state[f'patch_embed{i}.proj.weight'] = torch.randn(
            dims, cin, size, size)
        state[f'patch_embed{i}.proj.bias'] = torch.randn(dims)
        state.update(_norm(f'patch_embed{i}.norm', dims))
        state[f'pos_embed{i}'] = torch.randn(1, grid * grid + (i == 4), dims)
        for j in range(depth):
            block = f'block{i}.{j}'
            state.update(_norm(f'{block}.norm1', dims))
            state.update(_linear(f'{block}.attn.q', dims, dims))
            state.update(_linear(f'{block}.attn.kv', dims, 2 * dims))
            state.update(_linear(f'{block}.attn.proj', dims, dims))
            if i < 4:  # PVT's spatial reduction
                state[f'{block}.attn.sr.weight'] = torch.randn(
                    dims, dims, 2, 2)
                state[f'{block}.attn.sr.bias'] = torch.randn(dims)
                state.update(_norm(f'{block}.attn.norm', dims))
            state.update(_norm(f'{block}.norm2', dims))
            state.update(_linear(f'{block}.mlp.fc1', dims, 4 * dims))
            state.update(_linear(f'{block}.mlp.fc2', 4 * dims, dims))
        cin = dims
    state.update(_norm('norm', 512))
    state.update(_linear('head', 512, 1000))
    return state


def test_soft_checkpoint_counts_and_values(converter, tmp_path):
    ema, raw = soft_style_state_dict(0), soft_style_state_dict(1)
    src = tmp_path / 'soft_tiny.pth'
    torch.save({'state_dict': raw, 'state_dict_ema': ema, 'epoch': 299}, src)
    dst = tmp_path / 'lf_tiny_mmdet.pth'
    result = converter.main([str(src), str(dst)])

    linear_blocks, softmax_blocks = sum(DEPTHS[:3]), DEPTHS[3]
    # per block: norm1, q, v, proj, norm2, fc1, fc2 (stages 1-3);
    # norm1, qkv, proj, norm2, fc1, fc2 (stage 4); x (weight, bias)
    assert result.arch == 'tiny'  # inferred
    assert result.mapped == linear_blocks * 14 + softmax_blocks * 12 + 4 + 2
    skipped = {k: len(v) for k, v in result.skipped.items()}
    assert skipped == {
        'class token (the classifier pools instead)': 1,
        'classifier head, not backbone': 2,
        'LayerNorm of a patch embedding (our transitions use BatchNorm)': 8,
        'PVT spatial reduction (no counterpart)': 4 * linear_blocks,
        'no mapping rule': 1 + 4,  # 4x4 patch_embed1 conv, 4 conv biases
        'keys are shared with queries (share_qk)': 2 * linear_blocks,
        'shape differs from LaplacianFormer-tiny': 3,  # 2x2 transitions
    }
    # stem 3 x (conv + 5 BN tensors), 3 transitions alike, norm0-2, dwconvs
    assert len(result.missing) == 18 + 18 + 6 + 2 * linear_blocks

    out = torch.load(dst, weights_only=False)
    assert out['meta']['arch'] == 'tiny'
    state = out['state_dict']
    assert all(k.startswith('backbone.') for k in state)
    kv = ema['block2.1.attn.kv.weight']
    assert torch.equal(state['backbone.stages.1.blocks.1.attn.v.weight'], kv[128:])
    assert torch.equal(state['backbone.stages.1.blocks.1.attn.q.weight'],
                       ema['block2.1.attn.q.weight'])
    qkv = torch.cat(
        [ema['block4.1.attn.q.bias'], ema['block4.1.attn.kv.bias']])
    assert torch.equal(state['backbone.stages.3.blocks.1.attn.qkv.bias'], qkv)
    pos = ema['pos_embed4'][:, 1:].reshape(1, 7, 7, 512).permute(0, 3, 1, 2)
    assert torch.equal(state['backbone.stages.3.pos_embed'], pos)
    assert torch.equal(state['backbone.stages.3.norm.weight'],
                       ema['norm.weight'])

    # The output loads into the detection backbone as it is.
    model = LaplacianFormer(
        'tiny', init_cfg=dict(type='Pretrained', checkpoint=str(dst)))
    model.init_weights()
    loaded = model.state_dict()
    for key, value in state.items():
        assert torch.equal(loaded[key[len('backbone.'):]], value), key


def test_conversion_is_idempotent(converter, tmp_path):
    backbone = LaplacianFormer('small', out_indices=(3, ))
    classifier = OrderedDict(
        ('backbone.' + k, v) for k, v in backbone.state_dict().items())
    classifier['head.fc.weight'] = torch.randn(1000, 512)
    classifier['head.fc.bias'] = torch.randn(1000)
    src = tmp_path / 'classifier.pth'
    torch.save({'state_dict': classifier, 'meta': {'epoch': 3}}, src)
    once, twice = tmp_path / 'once.pth', tmp_path / 'twice.pth'
    first = converter.main([str(src), str(once), '--arch', 'small'])
    second = converter.main([str(once), str(twice)])
    assert first.passed == len(backbone.state_dict()) and first.renamed == 0
    assert second.arch == 'small' and not second.skipped
    assert once.read_bytes() == twice.read_bytes()
    a = torch.load(once, weights_only=False)
    b = torch.load(twice, weights_only=False)
    assert a['meta'] == b['meta']
    assert list(a['state_dict']) == list(b['state_dict'])
    for key, value in a['state_dict'].items():
        assert torch.equal(value, b['state_dict'][key]), key
        assert torch.equal(value, classifier[key]), key


def test_refuses_non_checkpoints(converter, tmp_path):
    text = tmp_path / 'notes.txt'
    text.write_text('not a checkpoint\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get('PYTHONPATH')])))
    proc = subprocess.run(
        [sys.executable, str(TOOL), str(text), str(tmp_path / 'out.pth')],
        capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode != 0
    assert 'is not a readable PyTorch checkpoint' in proc.stderr
    assert not (tmp_path / 'out.pth').exists()

    no_tensors = tmp_path / 'meta_only.pth'
    torch.save({'epoch': 3, 'meta': {'note': 'x'}}, no_tensors)
    with pytest.raises(SystemExit, match='no state dict'):
        converter.main([str(no_tensors), str(tmp_path / 'out.pth')])

    unrelated = tmp_path / 'resnet.pth'
    torch.save({'conv1.weight': torch.randn(8, 3, 3, 3)}, unrelated)
    with pytest.raises(SystemExit, match='no tensor'):
        converter.main([str(unrelated), str(tmp_path / 'out.pth'),
                        '--arch', 'tiny'])


def test_init_cfg_loads_soft_checkpoint_as_the_converter_writes_it(
        converter, tmp_path):
    """One checkpoint filter: ``init_cfg=dict(type='Pretrained')`` reads a
    SOFT-style checkpoint directly and loads the very tensors the converter
    writes (the stage norms the checkpoint lacks keep their init)."""
    src = tmp_path / 'soft_tiny.pth'
    torch.save({'state_dict_ema': soft_style_state_dict(0)}, src)
    dst = tmp_path / 'converted.pth'
    converter.main([str(src), str(dst)])
    converted = torch.load(dst, map_location='cpu')['state_dict']

    direct = LaplacianFormer(
        'tiny', init_cfg=dict(type='Pretrained', checkpoint=str(src)))
    direct.init_weights()
    state = direct.state_dict()
    assert len(converted) > 50
    for key, value in converted.items():
        assert torch.equal(state[key[len('backbone.'):]], value), key
