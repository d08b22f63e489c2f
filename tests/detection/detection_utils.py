"""Helpers of the detection tests: running the tools, reading their logs."""
from __future__ import annotations

import glob
import json
import os
import os.path as osp
import socket
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence

from tool_processes import start_python_tool

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
    """Run ``python <script> <args>`` (or ``bash <script>.sh``) from the repo.

    A Python tool is forked from the worker's tool server
    (:mod:`tool_processes`); a shell script runs in bash, and what it
    launches starts fresh interpreters. Output (stdout and stderr together)
    is in ``.stdout``. With ``expect_success`` a non-zero exit raises with
    the output's tail.
    """
    script = repo_path(args[0])
    env = env or tool_env()
    if script.endswith('.sh'):
        proc = subprocess.run(['bash', script, *args[1:]], cwd=REPO_ROOT,
                              env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              timeout=timeout)
    else:
        proc = _run_python_tool([script, *args[1:]], env, timeout)
    if expect_success and proc.returncode != 0:
        raise AssertionError(f'{" ".join(args)} exited {proc.returncode}:\n'
                             f'{proc.stdout[-8000:]}')
    return proc


def _run_python_tool(argv: List[str], env: Dict[str, str],
                     timeout: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as folder:
        output = osp.join(folder, 'output.txt')
        run = start_python_tool(argv, REPO_ROOT, env, output)
        try:
            returncode = run.wait(timeout)
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait()
            raise
        with open(output, encoding='utf-8', errors='replace') as f:
            stdout = f.read()
    return subprocess.CompletedProcess([sys.executable, *argv], returncode,
                                       stdout)


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
