"""Environment report for bug reports: ``python -m mmlaplacian.info``."""
from __future__ import annotations

import importlib
import platform
import subprocess
import sys
from collections import OrderedDict
from typing import Dict

PACKAGES = ('torch', 'mmengine', 'mmcv', 'mmdet', 'mmpretrain', 'mmseg',
            'timm', 'pycocotools', 'numpy')
# Import name -> distribution name, where they differ.
DISTRIBUTIONS = {'mmseg': 'mmsegmentation'}


def _version(name: str) -> str:
    try:
        from importlib.metadata import version
        return version(DISTRIBUTIONS.get(name, name))
    except Exception:  # not installed, or no metadata
        try:
            return importlib.import_module(name).__version__
        except Exception as err:
            return f'not available ({type(err).__name__})'


def _try_import(name: str) -> str:
    try:
        importlib.import_module(name)
        return 'yes'
    except Exception as err:
        return f'NO ({type(err).__name__}: {err})'


def _command_output(cmd: list, last: bool) -> str:
    """The first (or last) non-empty line a command prints."""
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 'not found'
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    if not lines:
        return 'not found'
    return lines[-1] if last else lines[0]


def openmmlab_stack() -> str:
    """Which OpenMMLab distributions provide ``mmcv``: ``upstream``,
    ``onedl`` (the maintained fork, same import names) or ``none``."""
    from importlib.metadata import PackageNotFoundError, version
    for stack, dist in (('onedl', 'onedl-mmcv'), ('upstream', 'mmcv')):
        try:
            return f'{stack} ({dist} {version(dist)})'
        except PackageNotFoundError:
            continue
    return 'none'


def _executorch_kernels_state() -> str:
    """Whether our ExecuTorch kernels' library is built and loads."""
    try:
        from mmlaplacian.deployment.executorch_kernels import (
            kernels_library, load_executorch_kernels)
        if kernels_library() is None:
            return 'not built (executorch absent at build time)'
        load_executorch_kernels()
        return 'loads'
    except Exception as err:
        return f'NO ({type(err).__name__}: {err})'


def collect_env() -> Dict[str, str]:
    """Everything a bug report needs, as an ordered name → value mapping."""
    env: Dict[str, str] = OrderedDict()
    env['sys.platform'] = sys.platform
    env['Python'] = sys.version.replace('\n', ' ')
    env['machine'] = platform.machine()
    for name in PACKAGES:
        env[name] = _version(name)
    env['mmlaplacian'] = _version('mmlaplacian')
    env['OpenMMLab stack'] = openmmlab_stack()
    try:
        import torch
        env['torch CUDA build'] = str(torch.version.cuda)
        env['CUDA available'] = str(torch.cuda.is_available())
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                cap = torch.cuda.get_device_capability(i)
                env[f'GPU {i}'] = (f'{torch.cuda.get_device_name(i)} '
                                   f'(sm_{cap[0]}{cap[1]})')
        env['torch parallel threads'] = str(torch.get_num_threads())
        from torch.utils.cpp_extension import CUDA_HOME
        env['CUDA_HOME'] = str(CUDA_HOME)
    except ImportError:
        pass
    env['mmcv._ext loads'] = _try_import('mmcv._ext')
    # mmseg imports ftfy and regex with its models: a missing one shows here.
    env['mmseg.models loads'] = _try_import('mmseg.models')
    env['mmlaplacian._ext loads'] = _try_import('mmlaplacian._ext')
    try:
        from mmlaplacian.ops import ext_info
        info = ext_info()
        env['mmlaplacian._ext devices'] = ', '.join(info.get('devices') or
                                                    []) or 'none'
        env['mmlaplacian._ext CUDA'] = str(info.get('cuda_version'))
        env['mmlaplacian._ext CUDA archs'] = str(info.get('cuda_arch_list'))
    except Exception as err:
        env['mmlaplacian._ext devices'] = f'unknown ({err})'
    env['executorch'] = _version('executorch')
    env['mmlaplacian._executorch_kernels'] = _executorch_kernels_state()
    env['GCC'] = _command_output(['gcc', '--version'], last=False)
    env['NVCC'] = _command_output(['nvcc', '--version'], last=True)
    return env


def main() -> None:
    env = collect_env()
    width = max(len(k) for k in env)
    for key, value in env.items():
        print(f'{key:<{width}} : {value}')


if __name__ == '__main__':
    main()
