"""A ``tools/train.py`` run in the background, to be killed at a chosen
point: the helpers of the fault tests."""
from __future__ import annotations

import glob
import os.path as osp
import time
from typing import Callable, Dict, List, Optional

import torch
from detection_utils import REPO_ROOT, RETINANET_CONFIG
from tool_processes import start_python_tool

NO_VALIDATION = ['val_dataloader=None', 'val_evaluator=None', 'val_cfg=None']


class TrainingProcess:
    """``python tools/train.py RETINANET_CONFIG --work-dir W ...``, its
    output in ``W/output_<n>.txt``."""

    def __init__(self, work_dir: str, env: Dict[str, str], args: List[str],
                 name: str, file_size_limit: Optional[int] = None) -> None:
        self.output = osp.join(work_dir, f'output_{name}.txt')
        self.proc = start_python_tool(
            ['tools/train.py', RETINANET_CONFIG, '--work-dir', work_dir,
             *args], REPO_ROOT, env, self.output, file_size_limit)

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
        self.proc.wait(timeout=timeout)
        return self.proc.returncode


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
