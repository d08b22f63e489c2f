"""The CUDA build of mmlaplacian._ext on a machine with a GPU."""
import os.path as osp
import subprocess
import sys
import textwrap

import pytest
import torch
from gpu_utils import GPU_TEST, record

from mmlaplacian.ops import ext_info

pytestmark = GPU_TEST
REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def test_extension_has_cuda_kernels():
    """With a GPU present, an extension without CUDA kernels is a broken
    install (the ops would silently fall back to the PyTorch reference)."""
    info = ext_info()
    assert info['loaded'], f'mmlaplacian._ext did not load: {info["error"]}'
    assert 'cuda' in info['devices'], (
        'a CUDA device is present but mmlaplacian._ext has no CUDA kernels: '
        'rebuild with `FORCE_CUDA=1 python setup.py build_ext --inplace`')
    major, minor = torch.cuda.get_device_capability()
    assert f'{major}.{minor}' in info['cuda_arch_list'].split(';'), (
        f'the kernels were built for {info["cuda_arch_list"]}, not for this '
        f'GPU (sm_{major}{minor}): set TORCH_CUDA_ARCH_LIST and rebuild')
    record('CUDA build', 'CUDA runtime', info['cuda_version'])
    record('CUDA build', 'architectures', info['cuda_arch_list'])
    record('CUDA build', 'device', torch.cuda.get_device_name())


# Runs in a fresh process: the first launch of each Newton–Schulz kernel
# variant (which sets its shared-memory limit) happens from many threads.
FIRST_LAUNCH_FROM_THREADS = textwrap.dedent('''
    import threading
    import torch
    from mmlaplacian.ops import newton_schulz_inverse
    from mmlaplacian.ops.reference import newton_schulz_forward_reference

    cases = [(m, dtype) for m in (20, 49, 97, 128)
             for dtype in (torch.float32, torch.float64)] * 3
    errors = []

    def run(m, dtype):
        try:
            q = torch.randn(4, m, m, dtype=torch.float64)
            a = (q @ q.mT / m + torch.eye(m, dtype=torch.float64)).to(dtype)
            x = newton_schulz_inverse(a.cuda(), impl='cuda').cpu()
            torch.cuda.synchronize()
            ref = newton_schulz_forward_reference(a, 20, 'auto')
            tol = 1e-10 if dtype == torch.float64 else 1e-4
            torch.testing.assert_close(x, ref, rtol=tol, atol=tol)
        except Exception as err:  # reported by the parent
            errors.append(f'm={m} {dtype}: {err!r}')

    threads = [threading.Thread(target=run, args=c) for c in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print('errors:', errors)
    raise SystemExit(1 if errors else 0)
''')


def test_newton_schulz_first_launch_from_threads():
    """24 threads make the first launches of the fused kernel's variants at
    once (the shared-memory limit is set once per device and variant)."""
    proc = subprocess.run([sys.executable, '-c', FIRST_LAUNCH_FROM_THREADS],
                          capture_output=True, text=True, timeout=300,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_autocast_keeps_ops_in_fp32(dtype):
    """Under CUDA autocast the ops compute and return fp32."""
    from mmlaplacian.ops import laplace_kernel, newton_schulz_inverse
    x = torch.randn(2, 50, 32, device='cuda') / 32
    y = torch.randn(2, 7, 32, device='cuda') / 32
    a = torch.eye(7, device='cuda').expand(2, 7, 7) * 2
    with torch.autocast('cuda', dtype=dtype):
        out = laplace_kernel(x, y)
        inv = newton_schulz_inverse(a.to(dtype))
    assert out.dtype == torch.float32 and inv.dtype == torch.float32
    expected = (x[:, :, None] - y[:, None]).abs().sum(-1).neg().exp()
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
