"""Training and evaluation plumbing: runner set-up, CPU launch and AMP."""
from .cpu_autocast import CPUAutocastOptimWrapper, enable_amp
from .distributed import init_cpu_distributed, shutdown_distributed
from .runner import build_runner, load_config, read_config

__all__ = [
    'CPUAutocastOptimWrapper', 'enable_amp', 'init_cpu_distributed',
    'shutdown_distributed', 'build_runner', 'load_config', 'read_config'
]
