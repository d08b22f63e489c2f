"""Training and evaluation plumbing: runner set-up, CPU launch, AMP, checks
that stop a run with a clear message, and hooks that write each file once
and whole."""
from .atomic_files import AtomicLocalBackend, atomic_write
from .checkpoint_hook import AtomicCheckpointHook, CheckpointWriteError
from .config_checks import unknown_option_keys, warn_unknown_options
from .cpu_autocast import CPUAutocastOptimWrapper, enable_amp
from .distributed import (init_cpu_distributed, set_default_timeout,
                          shutdown_distributed)
from .finite_check_hook import FiniteCheckHook
from .logger_hook import RankZeroLoggerHook
from .runner import build_runner, load_config, read_config

__all__ = [
    'AtomicCheckpointHook', 'AtomicLocalBackend', 'CPUAutocastOptimWrapper',
    'CheckpointWriteError', 'FiniteCheckHook', 'RankZeroLoggerHook',
    'atomic_write', 'build_runner', 'enable_amp', 'init_cpu_distributed',
    'load_config', 'read_config', 'set_default_timeout',
    'shutdown_distributed', 'unknown_option_keys', 'warn_unknown_options'
]
