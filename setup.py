"""Build script for mmlaplacian and its fused-op extension ``mmlaplacian._ext``.

The extension is compiled from ``cuda_ops/``: the C++ CPU kernels always, the CUDA
kernels when torch has CUDA and a toolkit is found, or when ``FORCE_CUDA=1``.
With executorch installed, ``cuda_ops/executorch/`` becomes
``mmlaplacian._executorch_kernels``, our kernel for ExecuTorch's runtime.
Install with ``pip install --no-build-isolation -e .`` so the extension is built
against the torch that is already installed.
"""
import glob
import os
import os.path as osp
import shutil
from typing import Optional

from setuptools import find_packages, setup

DEFAULT_CUDA_ARCH_LIST = '7.5;8.0;8.6;8.9;9.0'


def read_version() -> str:
    namespace: dict = {}
    with open(osp.join('mmlaplacian', 'version.py'), encoding='utf-8') as f:
        exec(f.read(), namespace)
    return namespace['__version__']


def read_requirements(path: str) -> list:
    with open(path, encoding='utf-8') as f:
        lines = (line.split('#')[0].strip() for line in f)
        return [line for line in lines if line and not line.startswith('-')]


EXTRAS = ('mmdet', 'mmseg', 'mmpretrain', 'onedl', 'timm', 'deploy',
          'executorch', 'tests')


def make_extras() -> dict:
    """``pip install mmlaplacian[mmdet]`` and the like, one requirements
    file each; ``[openmmlab]`` is the upstream mmdet + mmseg + mmpretrain."""
    extras = {
        name: read_requirements(f'requirements/{name}.txt')
        for name in EXTRAS
    }
    extras['openmmlab'] = sorted(
        set(extras['mmdet'] + extras['mmseg'] + extras['mmpretrain']))
    return extras


def locate_cuda_home() -> None:
    """Point ``CUDA_HOME`` at a real toolkit when nvcc is only a wrapper.

    torch guesses the toolkit from ``which nvcc``; a wrapper script such as
    ``/usr/local/bin/nvcc`` makes it guess ``/usr/local``, which has no
    ``cuda_runtime.h``. Must run before ``torch.utils.cpp_extension`` loads.
    """
    if os.getenv('CUDA_HOME') or os.getenv('CUDA_PATH'):
        return
    nvcc = shutil.which('nvcc')
    if nvcc is None:
        return
    guess = osp.dirname(osp.dirname(osp.realpath(nvcc)))
    for root in (guess, '/usr/local/cuda'):
        if osp.isfile(osp.join(root, 'include', 'cuda_runtime.h')):
            os.environ['CUDA_HOME'] = root
            return


def want_cuda() -> bool:
    """Whether to compile the CUDA kernels (needs nvcc and a CUDA torch)."""
    import torch
    from torch.utils.cpp_extension import CUDA_HOME
    if os.getenv('FORCE_CUDA', '0') == '1':
        if CUDA_HOME is None:
            raise RuntimeError(
                'FORCE_CUDA=1 but no CUDA toolkit was found: set CUDA_HOME '
                'to the toolkit folder (the one holding bin/nvcc).')
        return True
    return torch.cuda.is_available() and CUDA_HOME is not None


NO_TORCH_MESSAGE = (
    'mmlaplacian compiles its extension against the torch of the environment '
    'it is installed into, and this build sees no torch. Install torch '
    'first, then build without isolation: pip install --no-build-isolation .'
    ' (an isolated build would compile against another copy of torch, '
    'which the installed one cannot load)')


def make_extensions() -> list:
    if os.getenv('MMLAPLACIAN_NO_EXT', '0') == '1':
        return []
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SystemExit(f'error: {NO_TORCH_MESSAGE}')
    locate_cuda_home()
    from torch.utils.cpp_extension import CppExtension, CUDAExtension
    root = 'cuda_ops'
    # The operators' schemas and the module (cuda_ops/*.cpp), the CPU kernels.
    sources = sorted(glob.glob(osp.join(root, '*.cpp')))
    sources += sorted(glob.glob(osp.join(root, 'cpu', '*.cpp')))
    include_dirs = [osp.abspath(osp.join(root, 'common'))]
    # No -std flag: torch's build helpers choose the standard its headers need.
    extra_cxx = ['-O3']
    link_args = []
    if os.name != 'nt':
        extra_cxx.append('-fopenmp')
        link_args.append('-fopenmp')
    options = dict(
        name='mmlaplacian._ext',
        include_dirs=include_dirs,
        extra_compile_args={'cxx': extra_cxx},
        extra_link_args=link_args)
    if not want_cuda():
        return [CppExtension(sources=sources, **options)]
    os.environ.setdefault('TORCH_CUDA_ARCH_LIST', DEFAULT_CUDA_ARCH_LIST)
    sources += sorted(glob.glob(osp.join(root, 'cuda', '*.cu')))
    options['extra_compile_args']['nvcc'] = [
        '-O3', '--use_fast_math', '-lineinfo'
    ]
    return [
        CUDAExtension(
            sources=sources,
            define_macros=[('MMLAPLACIAN_WITH_CUDA', None)],
            **options)
    ]


def executorch_root() -> Optional[str]:
    """The installed executorch package's folder when it ships its runtime
    (headers and ``lib/libexecutorch.so``), else None. Found without
    importing it: importing executorch loads all of torch's export stack."""
    import importlib.util
    spec = importlib.util.find_spec('executorch')
    for root in (spec.submodule_search_locations or []) if spec else []:
        if (osp.isfile(osp.join(root, 'lib', 'libexecutorch.so'))
                and osp.isdir(osp.join(root, 'include', 'executorch'))):
            return root
    return None


def make_executorch_kernels() -> list:
    """``mmlaplacian._executorch_kernels``: our kernel for ExecuTorch's
    runtime (cuda_ops/executorch/), linked against the installed
    executorch's runtime; nothing when executorch is not installed."""
    if os.getenv('MMLAPLACIAN_NO_EXT', '0') == '1':
        return []
    root = executorch_root()
    if root is None:
        print('mmlaplacian: no executorch runtime (headers and '
              'lib/libexecutorch.so) installed; '
              'mmlaplacian._executorch_kernels is not built')
        return []
    from importlib.metadata import version
    from setuptools import Extension
    lib = osp.join(root, 'lib')
    include = osp.join(root, 'include')
    # A shared library with a Python extension's name, so that setuptools
    # builds and places it like one; it is loaded with ctypes, not imported.
    return [
        Extension(
            name='mmlaplacian._executorch_kernels',
            sources=sorted(glob.glob(osp.join('cuda_ops', 'executorch',
                                              '*.cpp'))),
            include_dirs=[
                osp.abspath(osp.join('cuda_ops', 'common')), include,
                osp.join(include, 'executorch', 'runtime', 'core',
                         'portable_type', 'c10')
            ],
            # What executorch's CMake package gives its consumers: its c10
            # headers' macros, the profiler's events (the kernel's time
            # shows in ETDump) and the thread pool behind parallel_for.
            define_macros=[('C10_USING_CUSTOM_GENERATED_MACROS', None),
                           ('ET_EVENT_TRACER_ENABLED', None),
                           ('ET_USE_THREADPOOL', None),
                           ('MMLAPLACIAN_EXECUTORCH_VERSION',
                            f'"{version("executorch")}"')],
            library_dirs=[lib],
            libraries=['executorch', 'executorch_threadpool'],
            # The executorch beside an installed mmlaplacian in
            # site-packages, else (an editable install) the one it was
            # built against.
            runtime_library_dirs=['$ORIGIN/../executorch/lib', lib],
            # The kernel's loops carry `omp simd` hints; no OpenMP runtime.
            extra_compile_args=['-O3', '-fopenmp-simd'],
            language='c++')
    ]


def make_cmdclass() -> dict:
    if os.getenv('MMLAPLACIAN_NO_EXT', '0') == '1':
        return {}
    from torch.utils.cpp_extension import BuildExtension
    return {'build_ext': BuildExtension.with_options(use_ninja=True)}


if __name__ == '__main__':
    setup(
        name='mmlaplacian',
        version=read_version(),
        description='LaplacianFormer backbone and fused ops for OpenMMLab '
        'detection',
        long_description=open('README.md', encoding='utf-8').read(),
        long_description_content_type='text/markdown',
        license='Apache-2.0',
        python_requires='>=3.9',
        packages=find_packages(include=('mmlaplacian', 'mmlaplacian.*')),
        include_package_data=True,
        # The core needs torch only; each framework is an extra. The exact
        # versions tested live in requirements/constraints/<stack>.txt.
        install_requires=read_requirements('requirements/runtime.txt'),
        extras_require=make_extras(),
        ext_modules=make_extensions() + make_executorch_kernels(),
        cmdclass=make_cmdclass(),
        zip_safe=False,
    )
