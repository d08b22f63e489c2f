"""A rank that dies in a distributed run ends the whole run, promptly and
with the rank named, instead of leaving the others waiting."""
import os
import re
import signal
import subprocess
import time

import pytest
from detection_utils import REPO_ROOT, RETINANET_CONFIG, free_port
from training_process import NO_VALIDATION

from mmlaplacian.engine import set_default_timeout
from mmlaplacian.engine.distributed import DEFAULT_TIMEOUT
from mmlaplacian.engine.runner import load_config

pytestmark = pytest.mark.timeout(300)


def workers_of(launcher_pid: int) -> dict:
    """``{rank: pid}`` of the torchrun workers started by ``launcher_pid``."""
    found = {}
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            with open(f'/proc/{pid}/stat') as f:
                parent = int(f.read().rsplit(')', 1)[1].split()[1])
            if parent != launcher_pid:
                continue
            with open(f'/proc/{pid}/environ', 'rb') as f:
                env = dict(item.split(b'=', 1) for item in
                           f.read().split(b'\0') if b'=' in item)
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if b'RANK' in env:
            found[int(env[b'RANK'])] = int(pid)
    return found


@pytest.mark.slow
def test_killed_rank_ends_the_run(synthetic_env, tmp_path):
    output = tmp_path / 'output.txt'
    with open(output, 'w') as out:
        launcher = subprocess.Popen([
            'bash', 'tools/dist_train.sh', RETINANET_CONFIG, '2',
            '--work-dir', str(tmp_path / 'work'), '--cfg-options',
            'train_cfg.max_epochs=50', 'default_hooks.checkpoint=None',
            *NO_VALIDATION
        ], cwd=REPO_ROOT, env=dict(synthetic_env, PORT=str(free_port())),
                                    stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 180
            while not re.search(r'Epoch\(train\)\s+\[\s*1\]\[1/',
                                output.read_text()):
                assert launcher.poll() is None, output.read_text()[-5000:]
                assert time.monotonic() < deadline, 'training did not start'
                time.sleep(0.1)
            os.kill(workers_of(launcher.pid)[1], signal.SIGKILL)
            killed = time.monotonic()
            status = launcher.wait(timeout=120)
        finally:
            if launcher.poll() is None:
                launcher.kill()
    took = time.monotonic() - killed
    text = output.read_text()
    assert status != 0
    assert took < 60, f'the run went on for {took:.0f} s after rank 1 died'
    assert 'ChildFailedError' in text
    assert re.search(r'rank\s*:\s*1 \(local_rank: 1\)', text), text[-3000:]
    assert 'Signal 9 (SIGKILL)' in text
    assert not re.search(r'Epoch\(train\)\s+\[50\]', text)


def test_process_group_timeout_defaults_and_config_wins():
    cfg = load_config(RETINANET_CONFIG, 'pytorch')
    cfg.env_cfg.dist_cfg.pop('timeout', None)
    set_default_timeout(cfg)
    assert cfg.env_cfg.dist_cfg.timeout == DEFAULT_TIMEOUT == 1800
    cfg.env_cfg.dist_cfg.timeout = 60
    set_default_timeout(cfg)
    assert cfg.env_cfg.dist_cfg.timeout == 60
