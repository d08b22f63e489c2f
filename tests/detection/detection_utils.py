"""Helpers of the detection tests: running the tools, reading their logs."""
from __future__ import annotations

import functools
import glob
import json
import os
import os.path as osp
import resource
import socket
import subprocess
import sys
from typing import Dict, List, Optional, Sequence

REPO_ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TEST_CONFIG_DIR = osp.join(osp.dirname(osp.abspath(__file__)), 'configs')
MASK_RCNN_CONFIG = osp.join(TEST_CONFIG_DIR, 'mask_rcnn_synthetic.py')
RETINANET_CONFIG = osp.join(TEST_CONFIG_DIR, 'retinanet_synthetic.py')
# The session's trained Mask R-CNN over-fits this many training images for
# this many epochs, long enough to learn them (see test_train_eval.py).
OVERFIT_IMAGES, OVERFIT_EPOCHS = 4, 20


def repo_path(*parts: str) -> str:
    return osp.join(REPO_ROOT, *parts)


def tool_env(**extra: str) -> Dict[str, str]:
    """The environment of a tool run: the repository first on PYTHONPATH."""
    env = dict(os.environ)
    paths = [REPO_ROOT] + ([env['PYTHONPATH']] if env.get('PYTHONPATH')
                           else [])
    env['PYTHONPATH'] = os.pathsep.join(paths)
    env['PYTHON'] = sys.executable
    # Spinning OpenMP threads slow every op down many times over when the
    # cores are shared (other processes, a second rank); sleeping ones do
    # not.
    env.setdefault('OMP_WAIT_POLICY', 'PASSIVE')
    env.update(extra)
    return env


def run_tool(args: Sequence[str],
             env: Optional[Dict[str, str]] = None,
             expect_success: bool = True,
             timeout: float = 900) -> subprocess.CompletedProcess:
    """Run ``python <script> <args>`` (or ``bash <script>.sh``) from the repo,
    in a fresh interpreter, as a user runs it.

    Output (stdout and stderr together) is in ``.stdout``. With
    ``expect_success`` a non-zero exit raises with the output's tail.
    """
    script = repo_path(args[0])
    runner = ['bash'] if script.endswith('.sh') else [sys.executable]
    proc = subprocess.run([*runner, script, *args[1:]], cwd=REPO_ROOT,
                          env=env or tool_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    if expect_success and proc.returncode != 0:
        raise AssertionError(f'{" ".join(args)} exited {proc.returncode}:\n'
                             f'{proc.stdout[-8000:]}')
    return proc


def start_python_tool(argv: List[str], env: Dict[str, str], output: str,
                      file_size_limit: Optional[int] = None
                      ) -> subprocess.Popen:
    """Start ``python <argv>`` from the repository in the background, in a
    fresh interpreter, with stdout and stderr written to ``output``.

    Args:
        argv: The script (relative to the repository) and its arguments.
        env: The tool's environment (:func:`tool_env`).
        output: File that receives the tool's stdout and stderr.
        file_size_limit: ``RLIMIT_FSIZE`` in bytes for the tool, if any: a
            write past it fails as on a full disk.
    """
    with open(output, 'wb') as out:
        return subprocess.Popen(
            [sys.executable, repo_path(argv[0]), *argv[1:]], cwd=REPO_ROOT,
            env=env, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=functools.partial(_limit_file_size, file_size_limit)
            if file_size_limit else None)


def _limit_file_size(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def latest_run_dir(work_dir: str) -> str:
    """The newest ``<work_dir>/<timestamp>`` folder of a runner."""
    runs = sorted(
        d for d in glob.glob(osp.join(work_dir, '*_*')) if osp.isdir(d))
    if not runs:
        raise FileNotFoundError(f'no run folder in {work_dir}')
    return runs[-1]


def read_scalars(work_dir: str) -> List[dict]:
    """The JSON lines of the newest run's ``vis_data/scalars.json``."""
    path = osp.join(latest_run_dir(work_dir), 'vis_data', 'scalars.json')
    with open(path, encoding='utf-8') as f:
        return [json.loads(line) for line in f if line.strip()]


def read_test_metrics(work_dir: str) -> dict:
    """The metrics json written by ``tools/test.py`` (newest run)."""
    run = latest_run_dir(work_dir)
    path = osp.join(run, osp.basename(run) + '.json')
    with open(path, encoding='utf-8') as f:
        return json.load(f)


def files_under(folder) -> List[str]:
    """Every file below ``folder``, relative to it (folders alone do not
    count)."""
    return sorted(
        osp.relpath(osp.join(d, f), folder)
        for d, _, names in os.walk(folder) for f in names)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def write_coco_subset(src: str, dst: str, image_ids: Sequence[int]) -> str:
    """A COCO annotation file holding only ``image_ids`` (all categories)."""
    with open(src, encoding='utf-8') as f:
        coco = json.load(f)
    keep = set(image_ids)
    coco['images'] = [im for im in coco['images'] if im['id'] in keep]
    coco['annotations'] = [
        a for a in coco['annotations'] if a['image_id'] in keep
    ]
    with open(dst, 'w', encoding='utf-8') as f:
        json.dump(coco, f)
    return dst
