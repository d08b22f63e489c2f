"""Load the scripts under tools/analysis_tools as modules."""
import importlib.util
import os.path as osp
import sys
from types import ModuleType

import pytest

TOOLS_DIR = osp.join(
    osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))), 'tools',
    'analysis_tools')


@pytest.fixture(scope='session')
def load_tool():
    """``load_tool('solver_study')`` imports ``tools/analysis_tools/...``."""

    def load(name: str) -> ModuleType:
        if TOOLS_DIR not in sys.path:
            sys.path.insert(0, TOOLS_DIR)  # for the shared backbone_zoo
        spec = importlib.util.spec_from_file_location(
            f'analysis_tools_{name}', osp.join(TOOLS_DIR, f'{name}.py'))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load
