"""mmengine full checkpoints load under torch >= 2.6 once mmlaplacian is in."""
import pickle

import pytest
import torch
import torch.nn as nn
from mmengine.model import BaseModel
from mmengine.runner import Runner

import mmlaplacian  # noqa: F401  (installs the loader fix)


class _ToyModel(BaseModel):

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 2)

    def forward(self, inputs, labels=None, mode='tensor'):
        out = self.linear(inputs)
        if mode == 'loss':
            return {'loss': (out - labels).square().mean()}
        return out


class _ToyData(torch.utils.data.Dataset):

    def __len__(self):
        return 8

    def __getitem__(self, index):
        gen = torch.Generator().manual_seed(index)
        return dict(inputs=torch.randn(4, generator=gen),
                    labels=torch.randn(2, generator=gen))


def _runner(work_dir, max_epochs):
    return Runner(
        model=_ToyModel(),
        work_dir=str(work_dir),
        train_dataloader=dict(
            dataset=_ToyData(),
            sampler=dict(type='DefaultSampler', shuffle=False),
            batch_size=4,
            collate_fn=dict(type='default_collate')),
        optim_wrapper=dict(optimizer=dict(type='AdamW', lr=1e-2)),
        train_cfg=dict(by_epoch=True, max_epochs=max_epochs),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=1)),
        randomness=dict(seed=0),
        default_scope='mmengine')


def test_full_checkpoint_resumes_through_mmengine(tmp_path):
    first = _runner(tmp_path, max_epochs=1)
    first.train()
    ckpt = tmp_path / 'epoch_1.pth'
    raw = torch.load(ckpt, weights_only=False)
    assert 'message_hub' in raw and 'optimizer' in raw
    if tuple(int(p) for p in torch.__version__.split('.')[:2]) >= (2, 6):
        # What mmengine alone would hit: the weights-only unpickler refuses.
        with pytest.raises(pickle.UnpicklingError):
            torch.load(ckpt)
    second = _runner(tmp_path / 'resumed', max_epochs=2)
    second.resume(str(ckpt))
    assert second.epoch == 1
    torch.testing.assert_close(second.model.linear.weight,
                               first.model.linear.weight)
    exp_avg = second.optim_wrapper.optimizer.state_dict()['state'][0]
    assert torch.equal(exp_avg['exp_avg'],
                       raw['optimizer']['state'][0]['exp_avg'])
    second.train()
    assert second.epoch == 2
