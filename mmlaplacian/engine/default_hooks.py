"""Our fixed versions of mmengine's logger and checkpoint hooks in a
config's ``default_hooks`` (see :mod:`.logger_hook`, :mod:`.checkpoint_hook`
for what they fix)."""
from __future__ import annotations

from mmengine.config import Config, ConfigDict

from .checkpoint_hook import AtomicCheckpointHook
from .logger_hook import RankZeroLoggerHook

# default_hooks key -> (mmengine's type, ours, mmengine's default settings
# when the config leaves the key out).
REPLACEMENTS = {
    'logger': ('LoggerHook', RankZeroLoggerHook.__name__, dict()),
    'checkpoint': ('CheckpointHook', AtomicCheckpointHook.__name__,
                   dict(interval=1)),
}


def use_fixed_default_hooks(cfg: Config) -> None:
    """Swap mmengine's ``LoggerHook`` and ``CheckpointHook`` for ours, in
    place.

    A hook the config disables (``None``) stays disabled, one of another
    type (a subclass of the user's) stays as it is, and one the config
    leaves out (mmengine would add its own) is added as ours.
    """
    if cfg.get('default_hooks') is None:
        cfg.default_hooks = ConfigDict()
    hooks = cfg.default_hooks
    for key, (theirs, ours, defaults) in REPLACEMENTS.items():
        if key not in hooks:
            hooks[key] = dict(type=ours, **defaults)
        elif hooks[key] is not None and hooks[key].get('type') in (
                theirs, f'mmengine.{theirs}'):
            hooks[key]['type'] = ours
