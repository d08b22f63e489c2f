"""What the GPU acceptance run (``tools/gpu_check.sh``) can count on here.

Looks at the driver (``nvidia-smi``), torch and the GPU's compute
capability, the CUDA toolkit (``nvcc``, headers), ``compute-sanitizer``,
the Python headers and the OpenMMLab packages on ``sys.path``, without
importing those packages. Writes ``--text`` (for the report), ``--json``
and ``--env`` (``KEY=value`` lines that gpu_check.sh reads; nothing else is
parsed, so warnings on stderr cannot be mistaken for data).

Exits 0 once it has looked; ``REASON`` is empty when a CUDA run is
possible here (a GPU that torch can use, and nvcc), else it says why not.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import os.path as osp
import shutil
import subprocess
import sys
import sysconfig
from typing import Dict, List, Optional

COMMAND_TIMEOUT_S = 30
PACKAGES = ('mmengine', 'mmcv', 'mmdet', 'pycocotools', 'shapely')


def run(cmd: List[str]) -> Optional[str]:
    """The command's stdout, or None if it fails or is missing."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def cuda_home() -> Optional[str]:
    """$CUDA_HOME, else the toolkit of the nvcc on PATH (through wrapper
    scripts such as /usr/local/bin/nvcc), else /usr/local/cuda."""
    if os.environ.get('CUDA_HOME'):
        return os.environ['CUDA_HOME']
    nvcc = shutil.which('nvcc')
    guesses = [osp.dirname(osp.dirname(osp.realpath(nvcc)))] if nvcc else []
    for root in guesses + ['/usr/local/cuda']:
        if osp.isfile(osp.join(root, 'include', 'cuda_runtime.h')):
            return root
    return None


def probe_driver(info: Dict) -> None:
    smi = shutil.which('nvidia-smi')
    info['nvidia_smi'] = smi
    info['gpus'] = run([smi, '--query-gpu=name,driver_version,memory.total',
                        '--format=csv,noheader']) if smi else None


def probe_torch(info: Dict) -> None:
    try:
        import torch
    except Exception as err:  # reported, not raised: the probe goes on
        info['torch_error'] = f'{type(err).__name__}: {err}'
        return
    info['torch'] = torch.__version__
    info['torch_cuda'] = torch.version.cuda
    info['cuda_available'] = torch.cuda.is_available()
    if info['cuda_available']:
        major, minor = torch.cuda.get_device_capability()
        info['capability'] = f'{major}.{minor}'
        info['device_name'] = torch.cuda.get_device_name()
    from torch.utils import cpp_extension
    info['torch_headers'] = any(
        osp.isfile(osp.join(p, 'torch', 'extension.h'))
        for p in cpp_extension.include_paths())


def probe_toolkit(info: Dict) -> None:
    home = cuda_home()
    info['cuda_home'] = home
    nvcc = osp.join(home, 'bin', 'nvcc') if home else shutil.which('nvcc')
    info['nvcc'] = nvcc if nvcc and os.access(nvcc, os.X_OK) else None
    version = run([info['nvcc'], '--version']) if info['nvcc'] else None
    info['nvcc_version'] = version.splitlines()[-1] if version else None
    info['cuda_headers'] = bool(home) and osp.isfile(
        osp.join(home, 'include', 'cuda_runtime.h'))
    candidates = [shutil.which('compute-sanitizer')]
    if home:
        candidates.append(osp.join(home, 'bin', 'compute-sanitizer'))
        candidates.append(osp.join(home, 'compute-sanitizer',
                                   'compute-sanitizer'))
    sanitizer = next((c for c in candidates if c and os.access(c, os.X_OK)),
                     None)
    info['sanitizer'] = sanitizer
    version = run([sanitizer, '--version']) if sanitizer else None
    info['sanitizer_version'] = version.splitlines()[-1] if version else None
    info['python_headers'] = osp.isfile(
        osp.join(sysconfig.get_paths()['include'], 'Python.h'))
    info['ninja'] = shutil.which('ninja')


def probe_packages(info: Dict) -> None:
    found = {}
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        found[name] = osp.dirname(spec.origin) if spec and spec.origin \
            else None
    info['packages'] = found


def reason_not_runnable(info: Dict) -> Optional[str]:
    if not info.get('nvidia_smi'):
        return ('no NVIDIA driver (nvidia-smi not found); on a CPU machine '
                'run make test')
    if not info.get('gpus'):
        return 'nvidia-smi lists no usable GPU'
    if 'torch' not in info:
        return f'cannot import torch: {info.get("torch_error")}'
    if not info.get('cuda_available'):
        return (f'torch {info["torch"]} (CUDA {info["torch_cuda"]}) cannot '
                'use the GPU: install a CUDA build of torch that matches '
                'the driver')
    if not info.get('nvcc'):
        return 'no CUDA toolkit (nvcc) to build the kernels: set CUDA_HOME'
    return None


def as_text(info: Dict) -> str:
    yes = {True: 'yes', False: 'NO', None: 'NO'}
    pkgs = info.get('packages', {})
    lines = [
        f'GPU (nvidia-smi): {info.get("gpus") or "none"}'
        f' [{info.get("nvidia_smi") or "nvidia-smi not found"}]',
        f'torch {info.get("torch", info.get("torch_error"))}, CUDA '
        f'{info.get("torch_cuda")}, usable: '
        f'{yes[info.get("cuda_available", False)]}',
        f'device: {info.get("device_name", "-")}, compute capability '
        f'{info.get("capability", "-")}',
        f'nvcc: {info.get("nvcc") or "not found"} '
        f'({info.get("nvcc_version") or "-"}), CUDA_HOME '
        f'{info.get("cuda_home")}',
        f'compute-sanitizer: {info.get("sanitizer") or "not found"} '
        f'({info.get("sanitizer_version") or "-"})',
        f'headers: CUDA {yes[info.get("cuda_headers")]}, torch '
        f'{yes[info.get("torch_headers")]}, Python '
        f'{yes[info.get("python_headers")]}; ninja '
        f'{info.get("ninja") or "not found"}',
        'packages: ' + ', '.join(f'{n} {"found" if p else "missing"}'
                                 for n, p in pkgs.items()),
        f'python {sys.version.split()[0]} ({sys.executable})',
    ]
    return '\n'.join(lines) + '\n'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--text', required=True)
    parser.add_argument('--json', required=True)
    parser.add_argument('--env', required=True)
    args = parser.parse_args()
    info: Dict = {}
    for part in (probe_driver, probe_torch, probe_toolkit, probe_packages):
        part(info)
    reason = reason_not_runnable(info)
    with open(args.json, 'w', encoding='utf-8') as f:
        json.dump(info, f, indent=1, default=str)
    with open(args.text, 'w', encoding='utf-8') as f:
        f.write(as_text(info))
    env = dict(CUDA_OK=int(bool(info.get('cuda_available'))),
               CAPABILITY=info.get('capability', ''),
               CUDA_HOME=info.get('cuda_home') or '',
               SANITIZER=info.get('sanitizer') or '',
               TORCH=info.get('torch', ''),
               REASON=reason or '')
    with open(args.env, 'w', encoding='utf-8') as f:
        for key, value in env.items():
            f.write(f'{key}={str(value).replace(chr(10), " ")}\n')
    sys.stdout.write(as_text(info))
    if reason:
        print(f'no GPU run is possible here: {reason}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
