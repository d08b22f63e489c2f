"""Where the operators come from: without ``mmlaplacian._ext`` (a torch-only
install) they exist with the extension's schemas and run the PyTorch
reference; an extension built from other sources is refused by name.

Each case is a fresh interpreter. The extension and the frameworks are
hidden the way Python records a failed import (``sys.modules[name] =
None``), so ``import mmlaplacian._ext`` raises ImportError as where it was
never built.
"""
import json
import os.path as osp
import subprocess
import sys
import textwrap

import pytest

from mmlaplacian.ops import ext_info
from mmlaplacian.ops.extension import OP_NAMES, SCHEMAS, declared_schema

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
HIDDEN = ('mmcv', 'mmengine', 'mmdet', 'mmseg', 'mmpretrain', 'timm',
          'transformers')

WITHOUT_EXTENSION = textwrap.dedent('''
    import json
    import sys
    for name in {hidden!r} + ('mmlaplacian._ext', ):
        sys.modules[name] = None

    import torch
    from mmlaplacian.ops import ext_info, laplace_kernel, newton_schulz_inverse
    from mmlaplacian.ops.extension import OP_NAMES, declared_schema
    from mmlaplacian.ops.reference import (laplace_kernel_forward_reference,
                                           newton_schulz_forward_reference)

    OPS = torch.ops.mmlaplacian
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 33, 8, dtype=torch.float64, generator=g) / 8
    y = torch.randn(2, 17, 8, dtype=torch.float64, generator=g) / 8
    x.requires_grad_()
    y.requires_grad_()
    torch.library.opcheck(OPS.laplace_kernel.default, (x, y))
    out = OPS.laplace_kernel(x.detach(), y.detach())
    grad = torch.randn(out.shape, dtype=out.dtype, generator=g)
    for need in ((True, True), (True, False), (False, True)):
        torch.library.opcheck(OPS.laplace_kernel_backward.default,
                              (grad, x.detach(), y.detach(), out, *need))
    assert torch.equal(out, laplace_kernel_forward_reference(x, y))
    assert torch.autograd.gradcheck(laplace_kernel, (x, y))

    a = torch.eye(6, dtype=torch.float64) * 2 + 0.1
    a = a.expand(2, 6, 6).clone().requires_grad_()
    torch.library.opcheck(OPS.newton_schulz_inverse.default, (a, 20, 'auto'))
    assert torch.equal(newton_schulz_inverse(a),
                       newton_schulz_forward_reference(a, 20, 'auto'))

    def loss(x, y):
        return laplace_kernel(x, y).square().sum()

    compiled = torch.compile(loss, fullgraph=True, backend='aot_eager')
    torch.testing.assert_close(
        torch.autograd.grad(compiled(x, y), (x, y)),
        torch.autograd.grad(loss(x, y), (x, y)))

    try:
        laplace_kernel(x, y, impl='cpp')
        cpp_error = None
    except RuntimeError as err:
        cpp_error = str(err)
    print(json.dumps(dict(info=ext_info(), cpp_error=cpp_error,
                          schemas=[declared_schema(n) for n in OP_NAMES])))
''')

STALE_EXTENSION = textwrap.dedent('''
    import sys
    import types
    for name in {hidden!r}:
        sys.modules[name] = None

    import torch
    {declare}
    sys.modules['mmlaplacian._ext'] = types.ModuleType('mmlaplacian._ext')
    try:
        import mmlaplacian.ops  # noqa: F401
    except ImportError as err:
        print(err)
''')


def run_fresh(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-c', script],
                          capture_output=True,
                          text=True,
                          timeout=280,
                          cwd=REPO)


@pytest.mark.timeout(300)
def test_without_the_extension_the_reference_serves_the_same_operators():
    proc = run_fresh(WITHOUT_EXTENSION.format(hidden=HIDDEN))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    info = report['info']
    assert not info['loaded'] and info['devices'] == []
    assert 'mmlaplacian._ext' in info['error'], info
    assert report['schemas'] == list(SCHEMAS)
    if ext_info()['loaded']:  # the schemas the C++ extension declares
        assert report['schemas'] == [declared_schema(n) for n in OP_NAMES]
    assert 'needs the compiled extension' in report['cpp_error']


@pytest.mark.parametrize('declare, declared', [
    ('', 'no operator laplace_kernel'),
    ("torch.library.define('mmlaplacian::laplace_kernel', "
     "'(Tensor x) -> Tensor')", 'laplace_kernel(Tensor x) -> Tensor'),
], ids=['no-operators', 'other-schema'])
@pytest.mark.timeout(120)
def test_extension_from_other_sources_is_refused(declare, declared):
    proc = run_fresh(
        STALE_EXTENSION.format(hidden=HIDDEN, declare=declare))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    message = proc.stdout.strip()
    assert message.startswith(
        'mmlaplacian._ext was built from other sources'), message
    assert f'declares {declared}, this code needs {SCHEMAS[0]}' in message
    assert 'rebuild it' in message
