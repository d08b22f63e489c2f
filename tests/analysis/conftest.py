"""Load the scripts under tools/analysis_tools as modules."""
import pytest


@pytest.fixture(scope='session')
def load_tool(load_script):
    """``load_tool('solver_study')`` imports ``tools/analysis_tools/...``."""
    return lambda name: load_script(f'tools/analysis_tools/{name}.py')
