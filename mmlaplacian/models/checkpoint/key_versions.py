"""State-dict key layouts of LaplacianFormer across package versions.

Version 1 (mmlaplacian <= 0.1 state dicts) kept parallel containers; version
2 gives every stage its own module (conv-BN pairs named as mmcv's
``ConvModule`` names them)::

    stem.{l}.0.weight / stem.{l}.1.*     -> stages.0.downsample.{l}.conv / .bn
    downsamples.{i}.0 / downsamples.{i}.1 -> stages.{i+1}.downsample.conv / .bn
    pos_embeds.{i}                       -> stages.{i}.pos_embed
    stages.{i}.{j}.mlp.fc1 / .mlp.fc2    -> stages.{i}.blocks.{j}.ffn.layers.0.0
                                            / .ffn.layers.1
    stages.{i}.{j}.*                     -> stages.{i}.blocks.{j}.*
    norm{i}.*                            -> stages.{i}.norm.*

The renames match version-1 keys only, so applying them to version-2 keys
changes nothing.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from typing import Callable, List, Mapping, Tuple, Union

STATE_DICT_VERSION = 2

_Rename = Tuple[str, Union[str, Callable[[re.Match], str]]]
V1_TO_V2: List[_Rename] = [
    (r'^stem\.(\d+)\.0\.', r'stages.0.downsample.\1.conv.'),
    (r'^stem\.(\d+)\.1\.', r'stages.0.downsample.\1.bn.'),
    (r'^downsamples\.(\d+)\.0\.',
     lambda m: f'stages.{int(m[1]) + 1}.downsample.conv.'),
    (r'^downsamples\.(\d+)\.1\.',
     lambda m: f'stages.{int(m[1]) + 1}.downsample.bn.'),
    (r'^pos_embeds\.(\d+)$', r'stages.\1.pos_embed'),
    (r'^stages\.(\d+)\.(\d+)\.mlp\.fc1\.', r'stages.\1.blocks.\2.ffn.layers.0.0.'),
    (r'^stages\.(\d+)\.(\d+)\.mlp\.fc2\.', r'stages.\1.blocks.\2.ffn.layers.1.'),
    (r'^stages\.(\d+)\.(\d+)\.', r'stages.\1.blocks.\2.'),
    (r'^norm(\d)\.', r'stages.\1.norm.'),
]


def upgrade_key(key: str) -> str:
    """A backbone key (no prefix) in the version-2 layout."""
    for pattern, replacement in V1_TO_V2:
        new_key, count = re.subn(pattern, replacement, key)
        if count:
            return new_key
    return key


def upgrade_state_dict(state_dict: Mapping, prefix: str = '') -> None:
    """Rename version-1 keys under ``prefix`` in place (order kept)."""
    items = list(state_dict.items())
    renamed = OrderedDict()
    for key, value in items:
        if key.startswith(prefix):
            key = prefix + upgrade_key(key[len(prefix):])
        renamed[key] = value
    if list(renamed) != [key for key, _ in items]:
        state_dict.clear()
        state_dict.update(renamed)
