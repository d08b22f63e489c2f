"""The dependency files agree: the core needs torch only, every package an
extra names has its tested version pinned in each stack's constraints, and
the install script refuses an unknown stack."""
import os.path as osp
import re
import subprocess

import pytest

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
STACK_EXTRAS = {
    'upstream': ['mmdet', 'mmseg', 'mmpretrain'],
    'onedl': ['onedl'],
}
SHARED_EXTRAS = ['timm', 'deploy', 'executorch', 'tests']


def names(path: str) -> list:
    """Distribution names of a requirements or constraints file; ``-c``
    and ``-r`` lines are followed."""
    found = []
    with open(path, encoding='utf-8') as f:
        for line in f:
            line = line.split('#')[0].strip()
            if line.startswith(('-c ', '-r ')):
                found += names(osp.join(osp.dirname(path), line[3:].strip()))
            elif line:
                found.append(re.split(r'[<>=!~;\[ ]', line)[0].lower())
    return found


def pins(stack: str) -> dict:
    path = osp.join(ROOT, 'requirements', 'constraints', f'{stack}.txt')
    result = {}
    with open(path, encoding='utf-8') as f:
        lines = [line.split('#')[0].strip() for line in f]
    for line in lines:
        if line.startswith('-c '):
            common = osp.join(osp.dirname(path), line[3:].strip())
            for name in names(common):
                result[name] = True
        elif line:
            assert '==' in line, f'{stack}: {line!r} is not an exact pin'
            result[line.split('==')[0].lower()] = True
    return result


def test_core_needs_torch_and_numpy_only():
    assert names(osp.join(ROOT, 'requirements', 'runtime.txt')) == [
        'torch', 'numpy'
    ]


@pytest.mark.parametrize('stack', sorted(STACK_EXTRAS))
def test_every_extra_of_a_stack_is_pinned(stack):
    pinned = pins(stack)
    for extra in STACK_EXTRAS[stack] + SHARED_EXTRAS:
        path = osp.join(ROOT, 'requirements', f'{extra}.txt')
        missing = [n for n in names(path) if n not in pinned]
        assert not missing, (stack, extra, missing)


def test_the_adapters_environment_is_pinned():
    """What tools/test_adapters.sh installs has its tested version in
    requirements/constraints/adapters.txt (torch among them: the
    extension built in place serves both environments)."""
    pinned = pins('adapters')
    wanted = ['torch', 'torchvision'] + [
        n for extra in ('build', 'runtime', 'adapters', 'tests')
        for n in names(osp.join(ROOT, 'requirements', f'{extra}.txt'))]
    assert [n for n in wanted if n not in pinned] == []


def test_stacks_do_not_mix():
    upstream, onedl = pins('upstream'), pins('onedl')
    assert not any(name.startswith('onedl-') for name in upstream)
    for name in ('mmcv', 'mmdet', 'mmengine', 'mmsegmentation', 'mmpretrain'):
        assert name not in onedl and name in upstream


def test_unknown_stack_is_refused():
    proc = subprocess.run(['bash', 'tools/install.sh'], cwd=ROOT,
                          env={'PATH': '/usr/bin:/bin', 'STACK': 'mmdet2'},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert 'unknown STACK=mmdet2' in proc.stderr
    assert 'STACK=upstream (the default) or STACK=onedl' in proc.stderr
