"""Config loading and runner construction shared by ``tools/train.py``,
``tools/test.py`` and the analysis tools."""
from __future__ import annotations

import importlib
import os.path as osp
from typing import Optional

from mmengine.config import Config
from mmengine.runner import Runner

from .default_hooks import use_fixed_default_hooks
from .distributed import init_cpu_distributed, set_default_timeout
from .unknown_cfg_options import warn_unknown_options


def read_config(path: str, cfg_options: Optional[dict] = None) -> Config:
    """Read a config file and merge ``--cfg-options`` overrides into it.

    Args:
        path (str): The config file.
        cfg_options (dict, optional): ``--cfg-options`` overrides
            (``{'model.backbone.lam': 2.0, ...}``); ``None`` or empty
            merges nothing.

    Returns:
        Config: The config with the overrides applied. A key that the
        config does not have is still merged, with a warning (a misspelt
        key would otherwise change nothing, silently).
    """
    cfg = Config.fromfile(path)  # names a missing file itself
    if cfg_options:
        warn_unknown_options(cfg, cfg_options)
        cfg.merge_from_dict(cfg_options)
    return cfg


def load_config(path: str,
                launcher: str = 'none',
                cfg_options: Optional[dict] = None,
                work_dir: Optional[str] = None) -> Config:
    """Read a config and apply the command-line settings every tool shares.

    Args:
        path (str): The config file.
        launcher (str): ``'none'``, ``'pytorch'``, ``'slurm'`` or ``'mpi'``.
        cfg_options (dict, optional): ``--cfg-options`` overrides.
        work_dir (str, optional): ``--work-dir``; otherwise the config's,
            otherwise ``./work_dirs/<config name>``.

    Returns:
        Config: The config, ready for :func:`build_runner`.
    """
    # ``--cfg-options launcher=...`` overrides ``--launcher``, as in mmdet.
    cfg = read_config(path, {'launcher': launcher, **(cfg_options or {})})
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(path))[0])
    return cfg


def build_runner(cfg: Config) -> Runner:
    """The config's runner (``runner_type`` when set, else mmengine's).

    Starts a gloo process group first when ``--launcher pytorch`` runs
    without a GPU, gives the process group a timeout, limits
    ``torch.compile`` recompilations as mmdet's tools do, and uses our
    logger and checkpoint hooks: mmengine 0.10.7's write the test metrics
    on every rank and checkpoints non-atomically, and mmengine is no longer
    released upstream to fix them (see ``logger_hook.py``,
    ``checkpoint_hook.py``).
    """
    from mmdet.utils import setup_cache_size_limit_of_dynamo
    setup_cache_size_limit_of_dynamo()
    use_fixed_default_hooks(cfg)
    set_default_timeout(cfg)
    if init_cpu_distributed(cfg):
        sync_bn_to_bn(cfg.model)
    if 'runner_type' not in cfg:
        return Runner.from_cfg(cfg)
    # The config's scope (mmdet, mmseg, ...) owns its runner registry.
    scope = cfg.get('default_scope') or 'mmdet'
    return importlib.import_module(f'{scope}.registry').RUNNERS.build(cfg)


def sync_bn_to_bn(model_cfg) -> None:
    """Replace SyncBN by BN in a model config, in place.

    SyncBN has no CPU kernel; with gloo on CPUs each process normalises its
    own batch instead (mmengine reverts SyncBN itself for one process).
    """
    if isinstance(model_cfg, dict):
        if model_cfg.get('type') == 'SyncBN':
            model_cfg['type'] = 'BN'
        for value in model_cfg.values():
            sync_bn_to_bn(value)
    elif isinstance(model_cfg, (list, tuple)):
        for value in model_cfg:
            sync_bn_to_bn(value)
