"""Checkpoints saved before stages became modules (state-dict version 1)
still load, through every loading path, and give the same outputs.

``tests/data/laplacianformer_v1_custom.pth`` was saved by mmlaplacian 0.1.0
(version-1 keys ``stem.*``, ``downsamples.*``, ``pos_embeds.*``,
``stages.{i}.{j}.*``, ``norm{i}.*``) as an mmpretrain-style classifier
checkpoint (``backbone.`` prefix, a head, mmengine's ``_metadata``), with an
input and the backbone's outputs on it.
"""
import os.path as osp
from collections import OrderedDict

import pytest
import torch
from mmengine.runner import load_checkpoint

from mmlaplacian.models import LaplacianFormer
from mmlaplacian.models.checkpoint import (STATE_DICT_VERSION,
                                           filter_backbone_state_dict,
                                           upgrade_state_dict)

V1_CHECKPOINT = osp.join(
    osp.dirname(osp.dirname(__file__)), 'data',
    'laplacianformer_v1_custom.pth')


@pytest.fixture(scope='module')
def v1():
    return torch.load(V1_CHECKPOINT, weights_only=False)


def _model(v1, **kwargs) -> LaplacianFormer:
    return LaplacianFormer(
        v1['meta']['arch'],
        pretrain_img_size=v1['meta']['pretrain_img_size'],
        attn_cfg=dict(impl='pytorch'),
        **kwargs).eval()


def _assert_same_outputs(model, v1):
    with torch.no_grad():
        outs = model(v1['input'])
    for out, expected in zip(outs, v1['outputs']):
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_v1_checkpoint_has_the_old_layout(v1):
    keys = list(v1['state_dict'])
    assert 'backbone.downsamples.0.0.weight' in keys
    assert 'backbone.stages.0.0.mlp.fc1.weight' in keys
    assert v1['state_dict']._metadata['backbone']['version'] == 1


def test_init_cfg_pretrained_loads_v1(v1):
    model = _model(
        v1, init_cfg=dict(type='Pretrained', checkpoint=V1_CHECKPOINT))
    model.init_weights()
    _assert_same_outputs(model, v1)


def test_mmengine_load_checkpoint_loads_v1_by_metadata(v1):
    """mmengine's loader (``load_from``, ``--resume``) keeps ``_metadata``:
    the version-1 tag triggers the renaming."""
    model = _model(v1)
    load_checkpoint(
        model, V1_CHECKPOINT, revise_keys=[(r'^backbone\.', '')])
    _assert_same_outputs(model, v1)


def test_plain_load_state_dict_without_metadata(v1):
    state = OrderedDict(
        (k[len('backbone.'):], v) for k, v in v1['state_dict'].items()
        if k.startswith('backbone.'))
    model = _model(v1)
    missing, unexpected = model.load_state_dict(state, strict=True)
    assert not missing and not unexpected
    _assert_same_outputs(model, v1)


def test_current_checkpoints_round_trip_and_are_tagged(v1, tmp_path):
    source = _model(v1)
    source.load_state_dict(filter_backbone_state_dict(v1))
    state = source.state_dict()
    assert state._metadata['']['version'] == STATE_DICT_VERSION == 2
    assert 'stages.1.downsample.conv.weight' in state
    assert 'stages.0.blocks.0.ffn.layers.0.0.weight' in state
    path = tmp_path / 'v2.pth'
    torch.save({'state_dict': state}, path)
    target = _model(v1, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    target.init_weights()
    _assert_same_outputs(target, v1)


def test_upgrade_is_idempotent(v1):
    state = filter_backbone_state_dict(v1)
    upgrade_state_dict(state)
    once = list(state)
    upgrade_state_dict(state)
    assert list(state) == once
    assert set(once) == set(_model(v1).state_dict())


def test_checkpoint_of_another_variant_names_both(tmp_path):
    path = tmp_path / 'small.pth'
    torch.save(LaplacianFormer('small').state_dict(), path)
    model = LaplacianFormer(
        'medium', init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    with pytest.raises(RuntimeError) as err:
        model.init_weights()
    message = str(err.value)
    assert 'small.pth' in message
    assert "'small'" in message and "'medium'" in message
    assert 'stages.2.pos_embed' in message  # the first mismatching key
