"""Shared fixtures: repository paths, tool scripts as modules, and the
optional real-COCO subset; the order of the suite under pytest-xdist."""
import importlib.util
import os
import os.path as osp
import sys
from types import ModuleType

import pytest

REPO_ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


@pytest.fixture(scope='session')
def repo_root() -> str:
    return REPO_ROOT


@pytest.fixture(scope='session')
def load_script():
    """``load_script('tools/x/y.py')`` imports a repository script by its
    path (scripts import ``mmlaplacian`` only, never their siblings), and
    the module into ``sys.modules`` (dataclasses look their module up
    there).
    """

    def load(relpath: str) -> ModuleType:
        path = osp.join(REPO_ROOT, relpath)
        name = relpath[:-len('.py')].replace('/', '_')
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    return load


def find_coco_mini():
    """``$COCO_MINI`` or ``<repo>/../shared/data/coco_mini``, else None."""
    for path in (os.environ.get('COCO_MINI'),
                 osp.join(REPO_ROOT, '..', 'shared', 'data', 'coco_mini')):
        if path and osp.isfile(
                osp.join(path, 'annotations', 'instances_val2017.json')):
            return osp.abspath(path)
    return None


@pytest.fixture(scope='session')
def coco_mini() -> str:
    path = find_coco_mini()
    if path is None:
        pytest.skip('real COCO subset not found: set $COCO_MINI or place it '
                    'at ../shared/data/coco_mini')
    return path


# Session fixtures too costly to build twice: under pytest-xdist
# (`make test`) every file that uses one (directly or through another
# fixture) runs in one worker, which builds it once.
SHARED_FIXTURES = ('trained_mask_rcnn', )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    """Group the tests by file for ``--dist loadgroup``: a file's module
    fixtures are built once, and the files that use one of
    :data:`SHARED_FIXTURES` share a worker (and that session fixture).

    Groups with a ``slow`` test come first (``make test`` passes
    ``--no-loadscope-reorder``, which keeps this order): started last, a
    50-second group would leave the other worker idle at the end.
    """
    if not config.pluginmanager.hasplugin('xdist'):
        return
    tests_root = osp.dirname(osp.abspath(__file__))
    files = {item: osp.relpath(str(item.path), tests_root).replace(
        os.sep, '/') for item in items}
    shared = {files[item]: name for item in items for name in SHARED_FIXTURES
              if name in item.fixturenames}
    groups = {item: shared.get(files[item], files[item]) for item in items}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[item]))
    slow = {groups[i] for i in items if i.get_closest_marker('slow')}
    items.sort(key=lambda item: groups[item] not in slow)
