"""``--cfg-options`` keys that name no setting of the config they override.

mmengine's ``Config.merge_from_dict`` adds any key it is given: a misspelt
``train_cfg.max_epoch=24`` creates a new, unused setting and the run goes
on with the old value. :func:`unknown_option_keys` finds such keys and
:func:`warn_unknown_options` reports them.
"""
from __future__ import annotations

import warnings
from typing import Any, List, Mapping, Optional

from mmengine.config import Config
from mmengine.logging import print_log

# Settings that the tools and the runner read although configs rarely set
# them: overriding them is not a typo.
RUNNER_KEYS = ('launcher', 'work_dir', 'resume', 'load_from')


def _missing_prefix(cfg: Any, key: str) -> Optional[str]:
    """The first dotted prefix of ``key`` that ``cfg`` does not have."""
    node = cfg
    parts = key.split('.')
    for depth, part in enumerate(parts):
        if isinstance(node, (list, tuple)):
            if not part.isdigit() or int(part) >= len(node):
                # mmengine raises a KeyError naming the list itself.
                return None
            node = node[int(part)]
        elif isinstance(node, Mapping):
            if part not in node:
                return '.'.join(parts[:depth + 1])
            node = node[part]
        else:
            # A scalar (or None) replaced by a dict: nothing to compare.
            return None
    return None


def unknown_option_keys(cfg: Config,
                        options: Optional[Mapping[str, Any]]) -> List[str]:
    """The ``--cfg-options`` keys that name no existing setting of ``cfg``.

    Args:
        cfg (Config): The config before the options are merged.
        options (Mapping, optional): ``{'model.backbone.lam': 2.0, ...}``.

    Returns:
        list[str]: Messages, one per unknown key, naming the missing part.
    """
    messages = []
    for key in options or {}:
        if key in RUNNER_KEYS:
            continue
        missing = _missing_prefix(cfg._cfg_dict, key)
        if missing is not None:
            messages.append(
                f'--cfg-options {key}: the config has no {missing!r}; it is '
                'added as a new setting, which only takes effect if some '
                'code reads it (check the spelling)')
    return messages


def warn_unknown_options(cfg: Config,
                         options: Optional[Mapping[str, Any]]) -> List[str]:
    """Warn (and log) for each unknown ``--cfg-options`` key.

    Returns:
        list[str]: The messages issued.
    """
    messages = unknown_option_keys(cfg, options)
    for message in messages:
        warnings.warn(message, UserWarning, stacklevel=2)
        print_log(message, logger='current', level=30)  # WARNING
    return messages
