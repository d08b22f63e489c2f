"""Shared fixtures: repository paths, tool scripts as modules, and the
optional real-COCO subset; the order of the suite, and its workers' garbage
collection and exit."""
import atexit
import gc
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
# Set in a worker once its session is over (pytest_unconfigure).
_SESSION_DONE = pytest.StashKey[bool]()


def pytest_configure(config) -> None:
    """Collect the youngest generation of cyclic garbage every 10,000
    allocations instead of 700: a worker holds the whole stack (torch,
    mmdet, mmseg, onnx), and the export and compile tests allocate millions
    of graph objects, which the collector walked again and again (4% less
    CPU time for the export, compile, config and operator test files, run
    side by side with and without)."""
    gc.set_threshold(10_000, 10, 10)
    if os.environ.get('PYTEST_XDIST_WORKER'):
        # Registered first, so it runs after every other exit handler.
        atexit.register(_exit_without_teardown, config)


def pytest_unconfigure(config) -> None:
    """A worker's session is over and its results are with the main
    process: move the heap out of the collector's sight. pytest's
    unraisable-exception check collects it five times when it unconfigures
    (3 to 5 s at the end of ``make test``), for warnings only."""
    if os.environ.get('PYTEST_XDIST_WORKER'):
        gc.freeze()
        config.stash[_SESSION_DONE] = True


def _exit_without_teardown(config) -> None:
    """End a worker whose session finished without the interpreter's
    teardown, which frees the heap of several GB object by object (the main
    process waited 5 s for it at the end of ``make test``)."""
    if config.stash.get(_SESSION_DONE, False):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    """Group the tests by file for ``--dist loadgroup``: a file's module
    fixtures are built once, and the files that use one of
    :data:`SHARED_FIXTURES` share a worker (and that session fixture).

    Groups with a ``slow`` test come first (``make test`` passes
    ``--no-loadscope-reorder``, which keeps this order): started last, a
    50-second group would leave the other worker idle at the end.
    """
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
