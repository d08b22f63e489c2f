"""The core needs torch only: with every OpenMMLab package and timm made
unimportable, ``import mmlaplacian`` works and the backbone, the classifier,
the attention and the ops build, load weights and run.

The packages are hidden the way Python itself records a failed import
(``sys.modules[name] = None``): ``import mmengine`` then raises ImportError
and ``importlib.util.find_spec('mmengine')`` returns None, as in an
environment where they were never installed. The test also runs in the
adapters' environment (``make test-adapters``), a virtual environment
without the OpenMMLab stack.
"""
import subprocess
import sys
import textwrap

import pytest

HIDDEN = ('mmcv', 'mmengine', 'mmdet', 'mmseg', 'mmpretrain', 'timm',
          'torchvision', 'transformers')

SCRIPT = textwrap.dedent('''
    import sys
    HIDDEN = {hidden!r}
    for name in HIDDEN:
        sys.modules[name] = None
    import importlib.util
    assert importlib.util.find_spec('mmengine') is None

    import torch
    import mmlaplacian
    from mmlaplacian import LaplacianFormer, laplace_kernel
    from mmlaplacian.models import LaplacianFormerClassifier
    from mmlaplacian.models.layers import LaplacianAttention

    torch.manual_seed(0)
    model = LaplacianFormer('tiny', init_cfg=None)
    model.init_weights()
    assert model.is_init
    model.eval()
    x = torch.rand(1, 3, 67, 93)
    with torch.no_grad():
        outs = model(x)
    print('shapes', [tuple(o.shape) for o in outs])

    # .to(device, dtype) and all: the float64 model matches the float32 one.
    model64 = LaplacianFormer('tiny').eval()
    model64.load_state_dict(model.state_dict())
    model64.to(torch.device('cpu'), torch.float64)
    with torch.no_grad():
        outs64 = model64(x.double())
    err = max((a.double() - b).abs().max().item()
              for a, b in zip(outs, outs64))
    assert err < 1e-3, err

    # Weights through a file, via the torch-only checkpoint reader.
    path = sys.argv[1]
    torch.save({{'state_dict': {{f'backbone.{{k}}': v for k, v in
                                 model.state_dict().items()}}}}, path)
    fresh = LaplacianFormer(
        'tiny', init_cfg=dict(type='Pretrained', checkpoint=path)).eval()
    fresh.init_weights()
    with torch.no_grad():
        again = fresh(x)
    assert all(torch.equal(a, b) for a, b in zip(outs, again))

    # Training step (the ops' registered autograd).
    model.train()
    sum(o.float().mean() for o in model(x)).backward()
    assert all(p.grad is not None for p in model.parameters()
               if p.requires_grad)

    attn = LaplacianAttention(64, 2, conv_kernel_size=3)
    print('attention', tuple(attn(torch.rand(2, 49, 64), (7, 7)).shape))
    q = torch.rand(2, 10, 8, dtype=torch.float64)
    k = torch.rand(2, 6, 8, dtype=torch.float64)
    fused, reference = laplace_kernel(q, k), laplace_kernel(q, k, 'pytorch')
    assert torch.allclose(fused, reference, rtol=1e-12, atol=0)
    print('kernel', tuple(fused.shape))
    head = LaplacianFormerClassifier('tiny', num_classes=7).eval()
    with torch.no_grad():
        print('logits', tuple(head(torch.rand(1, 3, 64, 64)).shape))

    # The export API imports without them too (detectors need torchvision
    # only when they run).
    import mmlaplacian.deployment  # noqa: F401
    from mmlaplacian.models.checkpoint import load_checkpoint_file
    try:
        load_checkpoint_file('open-mmlab://resnet50_v1c')
    except ValueError as err:
        print('scheme', 'not installed' in str(err))

    loaded = sorted(name for name in HIDDEN
                    if sys.modules.get(name) is not None)
    assert not loaded, loaded
    assert not hasattr(mmlaplacian, 'registry'), 'the OpenMMLab glue loaded'
    print('ok')
''')


@pytest.mark.timeout(300)
def test_core_runs_with_torch_only(tmp_path):
    script = SCRIPT.format(hidden=HIDDEN)
    proc = subprocess.run(
        [sys.executable, '-c', script, str(tmp_path / 'weights.pth')],
        capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == 'ok'
    assert 'shapes [(1, 64, 17, 24), (1, 128, 9, 12), (1, 320, 5, 6), ' \
        '(1, 512, 3, 3)]' in lines
    assert 'attention (2, 49, 64)' in lines
    assert 'kernel (2, 10, 6)' in lines
    assert 'logits (1, 7)' in lines
    assert 'scheme True' in lines
