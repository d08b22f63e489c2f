"""Every test file that uses the over-fitted Mask R-CNN runs in the worker
that trained it: under ``make test`` (pytest-xdist) a file outside
``SHARED_FIXTURE_GROUPS`` would train its own copy, 35 s on 2 cores."""
import ast
import glob
import os.path as osp
import re

TESTS = osp.dirname(osp.abspath(__file__))
SHARED = ('trained_mask_rcnn', 'mask_rcnn_test_run', 'overfit_options')


def shared_fixture_groups() -> dict:
    with open(osp.join(TESTS, 'conftest.py'), encoding='utf-8') as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if (isinstance(node, ast.Assign)
                and node.targets[0].id == 'SHARED_FIXTURE_GROUPS'):
            return ast.literal_eval(node.value)
    raise AssertionError('tests/conftest.py has no SHARED_FIXTURE_GROUPS')


def test_files_using_the_trained_detector_share_its_worker():
    pattern = re.compile(r'def test_\w+\(([^)]*)\)', re.S)
    users = set()
    for path in glob.glob(osp.join(TESTS, '**', 'test_*.py'), recursive=True):
        with open(path, encoding='utf-8') as f:
            arguments = ' '.join(pattern.findall(f.read()))
        if any(re.search(rf'\b{name}\b', arguments) for name in SHARED):
            users.add(osp.relpath(path, TESTS).replace(osp.sep, '/'))
    assert 'detection/test_distributed.py' in users  # the scan finds them
    groups = shared_fixture_groups()
    assert {u: groups.get(u) for u in sorted(users)} == {
        u: 'trained_mask_rcnn' for u in sorted(users)}
