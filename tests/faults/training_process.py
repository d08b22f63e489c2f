"""A ``tools/train.py`` run in the background, to be killed at a chosen
point: the helpers of the fault tests."""
from __future__ import annotations

import glob
import os
import os.path as osp
import subprocess
import time
from typing import Callable, Dict, List, Optional

import torch
from detection_utils import RETINANET_CONFIG, start_python_tool

NO_VALIDATION = ['val_dataloader=None', 'val_evaluator=None', 'val_cfg=None']
# Put first on a run's PYTHONPATH, its sitecustomize.py stops the run's
# checkpoint writes half-way (see there).
SLOW_CHECKPOINT_WRITE = osp.join(osp.dirname(osp.abspath(__file__)),
                                 'slow_checkpoint_write')


def with_slow_checkpoint_write(env: Dict[str, str]) -> Dict[str, str]:
    """``env`` with the run's checkpoint writes stopping half-way."""
    paths = [SLOW_CHECKPOINT_WRITE] + ([env['PYTHONPATH']]
                                       if env.get('PYTHONPATH') else [])
    return dict(env, PYTHONPATH=os.pathsep.join(paths))


class TrainingProcess:
    """``python tools/train.py RETINANET_CONFIG --work-dir W ...`` in a fresh
    interpreter, its output in ``W/output_<n>.txt``."""

    def __init__(self, work_dir: str, env: Dict[str, str], args: List[str],
                 name: str, file_size_limit: Optional[int] = None) -> None:
        self.output = osp.join(work_dir, f'output_{name}.txt')
        self.proc = start_python_tool(
            ['tools/train.py', RETINANET_CONFIG, '--work-dir', work_dir,
             *args], env, self.output, file_size_limit)

    def text(self) -> str:
        with open(self.output, encoding='utf-8', errors='replace') as f:
            return f.read()

    def wait_until(self, condition: Callable[[], bool],
                   what: str, timeout: float = 300) -> None:
        """Poll ``condition`` until it holds; fail if the run ends first."""
        deadline = time.monotonic() + timeout
        while not condition():
            if self.proc.poll() is not None:
                raise AssertionError(f'the run ended (status '
                                     f'{self.proc.returncode}) before '
                                     f'{what}:\n{self.text()[-6000:]}')
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f'no {what} in {timeout} s:\n'
                                     f'{self.text()[-6000:]}')
            time.sleep(0.02)

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL: no handler, no clean-up
        self.proc.wait()

    def finish(self, timeout: float = 300) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise


def checkpoints(work_dir: str) -> List[str]:
    return sorted(osp.basename(p) for p in glob.glob(osp.join(work_dir,
                                                              '*.pth')))


def temporaries(work_dir: str) -> List[str]:
    return sorted(glob.glob(osp.join(work_dir, '.*.tmp*')))


def last_checkpoint(work_dir: str):
    path = osp.join(work_dir, 'last_checkpoint')
    if not osp.isfile(path):
        return None
    with open(path, encoding='utf-8') as f:
        return f.read().strip()


def load(path: str) -> dict:
    return torch.load(path, map_location='cpu', weights_only=False)
