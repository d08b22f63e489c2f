"""Training and evaluation plumbing: runner set-up, CPU launch, AMP, checks
that stop a run with a clear message, and hooks that write each file once
and whole.

What of mmengine's beyond its public API these modules rely on, all in this
list, each with the tests that exercise it. Tested against both stacks:
upstream mmengine 0.10.7 and the maintained fork's onedl-mmengine 0.10.12.

- ``CheckpointHook._save_checkpoint_with_step(runner, step, meta)``, a
  private method, is overridden by :class:`AtomicCheckpointHook`, which
  reads and sets the attributes it uses (``keep_ckpt_ids``, ``last_ckpt``,
  ``filename_tmpl``, ``file_backend``, ``backend_args``,
  ``file_client_args``, ``out_dir``, ``max_keep_ckpts``):
  ``tests/faults/test_kill_resume.py``.
- ``CheckpointLoader``'s loader of local paths (the scheme ``''``) is
  replaced (:mod:`.checkpoint_loader`): ``tests/test_checkpoint_compat.py``.
- ``RuntimeInfoHook.after_train_iter`` puts every output of ``train_step``
  into the message hub as the host scalar ``train/<name>``, before hooks of
  lower priority run; :class:`FiniteCheckHook` reads them:
  ``tests/detection/test_finite_check.py``.
- ``Runner`` starts no process group of its own when one exists
  (:func:`init_cpu_distributed`): ``tests/detection/test_distributed.py``.
- ``Config._cfg_dict``, a private attribute, is read by
  :func:`unknown_option_keys`: ``tests/detection/test_command_line_checks.py``.
"""
from .atomic_files import AtomicLocalBackend, atomic_write
from .checkpoint_hook import AtomicCheckpointHook, CheckpointWriteError
from .cpu_autocast import CPUAutocastOptimWrapper, enable_amp
from .distributed import (init_cpu_distributed, set_default_timeout,
                          shutdown_distributed)
from .fast_evaluation import (compile_parts, configure_test_amp,
                              run_in_bfloat16)
from .finite_check_hook import FiniteCheckHook
from .logger_hook import RankZeroLoggerHook
from .runner import build_runner, load_config, read_config
from .unknown_cfg_options import unknown_option_keys, warn_unknown_options

__all__ = [
    'AtomicCheckpointHook', 'AtomicLocalBackend', 'CPUAutocastOptimWrapper',
    'CheckpointWriteError', 'FiniteCheckHook', 'RankZeroLoggerHook',
    'atomic_write', 'build_runner', 'compile_parts', 'configure_test_amp',
    'enable_amp', 'init_cpu_distributed',
    'load_config', 'read_config', 'run_in_bfloat16', 'set_default_timeout',
    'shutdown_distributed', 'unknown_option_keys', 'warn_unknown_options'
]
