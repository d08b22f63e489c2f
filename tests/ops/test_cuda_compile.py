"""Compile every CUDA source under cuda_ops/ with nvcc (no GPU needed).

Each .cu file is compiled once (``-c``) for sm_80 and sm_90 with the flags
torch's extension builder uses; the files compile in parallel.
"""
import os
import os.path as osp
import shutil
import subprocess
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from torch.utils import cpp_extension

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted((REPO / 'cuda_ops').rglob('*.cu'))
GENCODES = [
    '-gencode', 'arch=compute_80,code=sm_80', '-gencode',
    'arch=compute_90,code=sm_90'
]
TIMEOUT_S = 600


def find_nvcc():
    """nvcc from $CUDA_HOME, $PATH or /usr/local/cuda, else None."""
    candidates = [shutil.which('nvcc'), '/usr/local/cuda/bin/nvcc']
    cuda_home = os.environ.get('CUDA_HOME') or os.environ.get('CUDA_PATH')
    if cuda_home:
        candidates.insert(0, osp.join(cuda_home, 'bin', 'nvcc'))
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    return None


NVCC = find_nvcc()
pytestmark = [
    # nvcc may take minutes per source on 2 shared cores (TIMEOUT_S each).
    pytest.mark.timeout(1200),
    pytest.mark.skipif(
        NVCC is None,
        reason='nvcc not found: set CUDA_HOME or put nvcc on PATH to '
        'compile the CUDA sources'),
]


def torch_cxx_standard():
    """The -std= flag torch's extension builder passes to nvcc."""
    source = Path(cpp_extension.__file__).read_text(encoding='utf-8')
    return '-std=c++20' if "'-std=c++20'" in source else '-std=c++17'


def nvcc_command(source, output):
    torch_includes = cpp_extension.include_paths()
    cmd = [NVCC, '-c', str(source), '-o', str(output)]
    cmd += [f'-I{p}' for p in torch_includes]
    cmd += [
        f'-I{sysconfig.get_paths()["include"]}',
        f'-I{REPO / "cuda_ops" / "common"}',
        '-DMMLAPLACIAN_WITH_CUDA',
        '-DTORCH_EXTENSION_NAME=_ext',
        '-DTORCH_API_INCLUDE_EXTENSION_H',
    ]
    # CPU wheels ship c10's CUDA headers without the generated
    # cuda_cmake_macros.h, which only holds a Windows DLL-export switch.
    if not any(
            osp.isfile(osp.join(p, 'c10', 'cuda', 'impl',
                                'cuda_cmake_macros.h'))
            for p in torch_includes):
        cmd.append('-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE')
    cmd += list(cpp_extension.COMMON_NVCC_FLAGS)
    cmd += [
        torch_cxx_standard(), '-Xcompiler', '-fPIC', '-O3', '--use_fast_math',
        '-lineinfo'
    ]
    return cmd + GENCODES


def compile_one(source, out_dir):
    output = out_dir / (source.stem + '.o')
    cmd = nvcc_command(source, output)
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, f'nvcc timed out after {TIMEOUT_S}s'
    log = f'$ {" ".join(cmd)}\n{proc.stdout}{proc.stderr}'
    return proc.returncode == 0 and output.is_file(), log


@pytest.fixture(scope='module')
def compiled(tmp_path_factory):
    """Compile all sources in parallel once; maps source -> (ok, log)."""
    out_dir = tmp_path_factory.mktemp('nvcc')
    workers = max(1, min(len(SOURCES), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = pool.map(lambda s: compile_one(s, out_dir), SOURCES)
        return dict(zip(SOURCES, results))


def test_sources_exist():
    names = {s.name for s in SOURCES}
    assert {'laplace_kernel_cuda.cu', 'newton_schulz_cuda.cu'} <= names


@pytest.mark.parametrize(
    'source', SOURCES, ids=[str(s.relative_to(REPO)) for s in SOURCES])
def test_nvcc_compiles(compiled, source):
    ok, log = compiled[source]
    assert ok, f'nvcc failed on {source.relative_to(REPO)}:\n{log}'
