"""Parametrises op tests over every implementation that can run here.

A test taking ``device`` and ``impl`` runs for the PyTorch reference and the
compiled kernels on the CPU and (when present) the GPU; with
``@pytest.mark.compiled`` only for the compiled kernels. A test taking only
``impl`` runs on the CPU ones. Cases this machine cannot run are skipped
with the reason.
"""
import pytest
import torch

from mmlaplacian.ops import ext_info

EXT = ext_info()
NO_GPU = pytest.mark.skipif(
    not torch.cuda.is_available(), reason='needs a CUDA device')
NO_CPP = pytest.mark.skipif(
    'cpu' not in EXT['devices'],
    reason=f'mmlaplacian._ext has no CPU kernels ({EXT["error"]})')
NO_CUDA_EXT = pytest.mark.skipif(
    'cuda' not in EXT['devices'],
    reason='mmlaplacian._ext was built without CUDA kernels')

# (device, impl): the reference and the compiled kernels per device.
CASES = [
    pytest.param('cpu', 'pytorch', id='cpu-pytorch'),
    pytest.param('cpu', 'cpp', id='cpu-cpp', marks=NO_CPP),
    pytest.param('cuda', 'pytorch', id='cuda-pytorch', marks=NO_GPU),
    pytest.param('cuda', 'cuda', id='cuda-cuda', marks=[NO_GPU, NO_CUDA_EXT]),
]
CPU_IMPLS = [
    pytest.param('pytorch', id='pytorch'),
    pytest.param('cpp', id='cpp', marks=NO_CPP),
]


def _parametrized_here(metafunc) -> set:
    """Argument names the test parametrizes itself."""
    names = set()
    for mark in metafunc.definition.iter_markers('parametrize'):
        argnames = mark.args[0]
        if isinstance(argnames, str):
            argnames = argnames.split(',')
        names.update(name.strip() for name in argnames)
    return names


def pytest_generate_tests(metafunc):
    names = set(metafunc.fixturenames) - _parametrized_here(metafunc)
    if {'device', 'impl'} <= names:
        compiled = metafunc.definition.get_closest_marker('compiled')
        cases = [c for c in CASES
                 if not compiled or c.values[1] != 'pytorch']
        metafunc.parametrize('device,impl', cases)
    elif 'impl' in names:
        metafunc.parametrize('impl', CPU_IMPLS)
