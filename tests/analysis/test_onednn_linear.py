"""benchmarks.onednn_linear: float32 linear weights packed for oneDNN by
inductor's freezing, against torch's own packing for MKL."""
import pytest
import torch
import torch.nn as nn
from torch.profiler import profile

from benchmarks import onednn_linear
from benchmarks.onednn_linear import (onednn_linear_packing,
                                      onednn_linear_packing_enabled,
                                      set_onednn_linear_packing)

pytestmark = pytest.mark.skipif(
    not (torch.backends.mkldnn.is_available() and torch._C.has_mkl),
    reason='needs a torch with oneDNN and MKL (x86)')


def frozen_operators(model, x):
    """The compiled, frozen ``model``'s output at ``x`` and the names of
    the operators its code calls."""
    compiled = torch.compile(model, options={'freezing': True})
    with torch.no_grad(), torch._inductor.config.patch(freezing=True):
        compiled(x)
        with profile() as prof:
            out = compiled(x)
    return out, {event.key for event in prof.key_averages()}


def ffn():
    """A transformer FFN: a linear layer, GELU and a linear layer."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(24, 40), nn.GELU(),
                         nn.Linear(40, 24)).eval()


def test_float32_linears_are_packed_for_onednn_within_the_block():
    model, x = ffn(), torch.randn(70, 24)
    with torch.no_grad():
        expected = model(x)
    with onednn_linear_packing() as enabled:
        assert enabled and onednn_linear_packing_enabled()
        out, operators = frozen_operators(model, x)
    assert not onednn_linear_packing_enabled()
    assert 'mkldnn::_linear_pointwise' in operators
    assert 'mkl::_mkl_linear' not in operators
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)

    # After the block, torch's own packing again (a fresh model: compiled
    # code keeps the packing it was made with).
    out, operators = frozen_operators(ffn(), x)
    assert 'mkl::_mkl_linear' in operators
    assert 'mkldnn::_linear_pointwise' not in operators
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_switching_twice_changes_nothing():
    try:
        assert set_onednn_linear_packing(True)
        assert set_onednn_linear_packing(True)
        with onednn_linear_packing(False) as enabled:
            assert not enabled
        assert onednn_linear_packing_enabled()
    finally:
        disabled = not set_onednn_linear_packing(False)
    assert disabled and not set_onednn_linear_packing(False)


def test_a_packing_pass_of_another_form_is_left_alone(monkeypatch):
    from torch._inductor.fx_passes import mkldnn_fusion
    device_op = mkldnn_fusion.CpuMkldnnDeviceOp

    def pack_linear(self, graph, batch_size, input, weight, bias):
        raise AssertionError('not to be called here')

    monkeypatch.setattr(device_op, 'pack_linear', pack_linear)
    with pytest.warns(UserWarning, match='no inductor packing pass of the '
                      'known form'):
        assert not set_onednn_linear_packing(True)
    assert device_op.pack_linear is pack_linear
    assert not onednn_linear._originals
