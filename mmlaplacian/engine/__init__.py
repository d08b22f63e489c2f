"""Training and evaluation plumbing: runner set-up, CPU launch, AMP and
checks that stop a run with a clear message."""
from .config_checks import unknown_option_keys, warn_unknown_options
from .cpu_autocast import CPUAutocastOptimWrapper, enable_amp
from .distributed import init_cpu_distributed, shutdown_distributed
from .finite_check_hook import FiniteCheckHook
from .runner import build_runner, load_config, read_config

__all__ = [
    'CPUAutocastOptimWrapper', 'enable_amp', 'init_cpu_distributed',
    'shutdown_distributed', 'build_runner', 'load_config', 'read_config',
    'FiniteCheckHook', 'unknown_option_keys', 'warn_unknown_options'
]
