"""Autocast detection of the ops on torch 2.4+ and on older torch.

torch < 2.4 has no ``torch.is_autocast_enabled(device_type)``: calling it
with an argument raises TypeError, and the state is read from per-device
functions (``is_autocast_enabled()`` for CUDA, ``is_autocast_cpu_enabled()``
for the CPU). The old-torch branch is exercised here by showing the ops'
validation module a ``torch`` whose ``is_autocast_enabled`` behaves as
torch 2.3's did, under a real ``torch.autocast``.
"""
import pytest
import torch

from mmlaplacian.ops import laplace_kernel, newton_schulz_inverse
from mmlaplacian.ops import validation
from mmlaplacian.ops.validation import autocast_disabled, autocast_enabled

CPU = torch.device('cpu')
CUDA = torch.device('cuda')  # only its type is read; no GPU needed


class Torch23:
    """``torch`` as torch 2.1–2.3 presented it to the ops: an
    ``is_autocast_enabled()`` without arguments that reports CUDA's state
    (TypeError when given a device type); everything else is real torch."""

    def __init__(self, cuda_state=None):
        self.refused = []
        self._cuda_state = cuda_state

    def is_autocast_enabled(self, *args):
        if args:
            self.refused.append(args)
            raise TypeError('is_autocast_enabled() takes 0 positional '
                            f'arguments but {len(args)} were given')
        if self._cuda_state is not None:
            return self._cuda_state
        return torch.is_autocast_enabled('cuda')

    def __getattr__(self, name):
        return getattr(torch, name)


@pytest.fixture
def old_torch(monkeypatch):
    """The ops' validation module sees torch 2.3's API (torch itself, and
    torch.autocast, are untouched)."""
    fake = Torch23()
    monkeypatch.setattr(validation, 'torch', fake)
    return fake


@pytest.mark.parametrize('legacy', [False, True],
                         ids=['torch>=2.4', 'torch<2.4'])
def test_cpu_autocast_detected(request, legacy):
    refused = request.getfixturevalue('old_torch') if legacy else None
    assert not autocast_enabled(CPU)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert autocast_enabled(CPU)
        assert not autocast_enabled(CUDA)  # CPU autocast says nothing of CUDA
        with autocast_disabled(CPU):
            assert not autocast_enabled(CPU)
        assert autocast_enabled(CPU)
    assert not autocast_enabled(CPU)
    if legacy:  # the old-torch branch really ran
        assert refused.refused and all(
            args in (('cpu', ), ('cuda', )) for args in refused.refused)


def test_legacy_branch_reads_cuda_state(monkeypatch):
    """torch 2.3's argument-free ``is_autocast_enabled()`` is CUDA's state
    (a CUDA autocast cannot be entered without a GPU, so it is set here)."""
    monkeypatch.setattr(validation, 'torch', Torch23(cuda_state=True))
    assert autocast_enabled(CUDA)
    assert not autocast_enabled(CPU)


def test_unknown_device_type_is_not_autocast(old_torch):
    assert not autocast_enabled(torch.device('meta'))


@pytest.mark.parametrize('legacy', [False, True],
                         ids=['torch>=2.4', 'torch<2.4'])
def test_ops_compute_in_fp32_under_autocast(request, legacy):
    """Under CPU autocast the ops take the autocast path (fp32 out, mixed
    dtypes accepted) whichever way the state is read."""
    if legacy:
        request.getfixturevalue('old_torch')
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 9, 8, generator=g) / 8
    y = torch.randn(1, 5, 8, generator=g) / 8
    a = torch.eye(6).expand(1, 6, 6) * 2
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = laplace_kernel(x.bfloat16(), y)  # mixed dtypes: autocast only
        inv = newton_schulz_inverse(a.bfloat16())
    assert out.dtype == torch.float32 and inv.dtype == torch.float32
    torch.testing.assert_close(inv, a.inverse())
