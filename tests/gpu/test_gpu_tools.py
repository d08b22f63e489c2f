"""The helpers of the GPU acceptance run that need no GPU: the report's
pytest summaries, the check of the carried packages, the benchmark check."""
import json
import subprocess
import sys
import zipfile

import pytest


@pytest.fixture(scope='module')
def render(load_script):
    return load_script('tools/gpu/render_report.py')


@pytest.mark.parametrize('line', [
    '1 passed, 2 errors in 3.05s', '2 errors in 0.51s',
    '==== 3 failed, 1 passed, 4 skipped in 12.0s ====',
    'no tests ran in 0.01s'])
def test_pytest_summary_lines(render, line):
    log = f'$ python -m pytest tests/ops\nsome output\n{line}\n'
    summary = render.pytest_section(log, 'ops-tests')[0]
    assert summary == f'Summary: `{line.strip("= ")}`'


def test_tables_without_warnings(render):
    log = ('$ python -m benchmarks.ops\nUserWarning: TF32 is off\n'
           '## Laplacian kernel\n| impl | ms |\n|---|---|\n| cuda | 1.2 |\n')
    assert render.markdown_only(log) == (
        '## Laplacian kernel\n| impl | ms |\n|---|---|\n| cuda | 1.2 |')


def test_report_of_a_crash_keeps_what_says_where(render, tmp_path):
    """A crashed mmcv check shows its stages and faulthandler's stack in the
    mmcv section; a failed step's tail leaves out pytest's captured DEBUG
    lines and cuts compiler lines; a figure recorded twice is listed once."""
    logs = tmp_path / 'logs'
    logs.mkdir()
    (tmp_path / 'steps.tsv').write_text(
        'mmcv\tFAILED (exit 1)\t300\nops-tests\tFAILED (exit 1)\t200\n')
    (logs / 'mmcv.log').write_text('\n'.join([
        '$ bash tools/gpu/build_mmcv.sh', 'g++ ' + '-I/include ' * 200,
        'check: mmcv imported', 'Fatal Python error: Segmentation fault',
        'Current thread 0x00007f (most recent call first):',
        '  File "<string>", line 12 in <module>', '#0  0x7f in nms_cuda ()',
        'build_mmcv: mmcv was built but its CUDA ops do not load']) + '\n')
    (logs / 'ops-tests.log').write_text(
        '$ python -m pytest tests/ops\n' +
        'DEBUG    torch.__trace:utils.py:2126\n' * 50 +
        'E   AssertionError: ' + 'x' * 1000 + '\n1 failed in 3.0s\n')
    figure = json.dumps({'check': 'CUDA build', 'metric': 'device',
                         'value': 'H200', 'bound': None})
    (tmp_path / 'figures.jsonl').write_text(f'{figure}\n{figure}\n')
    report = subprocess.run(
        [sys.executable, 'tools/gpu/render_report.py', '--work',
         str(tmp_path), '--status', '1', '--seconds', '300'],
        capture_output=True, text=True, timeout=60, check=True).stdout
    mmcv = report.split('## mmcv')[1].split('##')[0]
    for line in ('check: mmcv imported', 'Fatal Python error',
                 'line 12 in <module>', '#0  0x7f in nms_cuda'):
        assert line in mmcv
    assert '-I/include' not in mmcv
    assert 'DEBUG' not in report
    tail = report.split('failed step `ops-tests`')[1]
    cut = [ln for ln in tail.splitlines() if 'AssertionError' in ln]
    assert len(cut) == 1 and cut[0].endswith('x [...]')
    assert len(cut[0]) == render.LINE_LIMIT + len(' [...]')
    assert report.count('| CUDA build | device | H200 |') == 1


def wheel(folder, name, version, requires=()):
    """A wheel holding only its metadata (what check_wheels reads)."""
    meta = [f'Name: {name}', f'Version: {version}']
    meta += [f'Requires-Dist: {r}' for r in requires]
    path = folder / f'{name}-{version}-py3-none-any.whl'
    with zipfile.ZipFile(path, 'w') as z:
        z.writestr(f'{name}-{version}.dist-info/METADATA',
                   '\n'.join(meta) + '\n')


def check_wheels(folder):
    return subprocess.run(
        [sys.executable, 'tools/gpu/check_wheels.py', str(folder)],
        capture_output=True, text=True, timeout=60)


def test_check_wheels(tmp_path, repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    wheel(tmp_path, 'mmdet', '3.3.0', ['numpy', 'shapely', 'mmcv<2.2,>=2.0'])
    wheel(tmp_path, 'shapely', '2.2.0', ['numpy>=1.21'])
    wheel(tmp_path, 'mmcv', '2.1.0', [
        'opencv-python>=3',  # the image's headless OpenCV counts
        'regex; sys_platform == "win32"', 'pytest; extra == "tests"'])
    proc = check_wheels(tmp_path)
    assert proc.returncode == 0, proc.stderr
    wheel(tmp_path, 'yapf', '0.43.0', ['platformdirs>=3.5.1'])
    wheel(tmp_path, 'termcolor', '1.0.0')
    wheel(tmp_path, 'mmengine', '0.10.7', ['termcolor>=2'])
    proc = check_wheels(tmp_path)
    assert proc.returncode == 1
    assert 'yapf needs platformdirs>=3.5.1: neither carried nor in the ' \
        'image' in proc.stderr
    assert 'mmengine needs termcolor>=2, but termcolor 1.0.0 is carried' \
        in proc.stderr


def test_check_benchmark(tmp_path, repo_root):
    results = tmp_path / 'results.json'
    cases = [dict(model='lf_tiny', size=[800, 1344], mode='fwd', status='ok'),
             dict(model='swin_t', size=[1600, 2688], mode='fwdbwd',
                  status='timeout', message='over 60 s')]
    for expected, subset in ((0, cases[:1]), (1, cases)):
        results.write_text(json.dumps(subset))
        proc = subprocess.run(
            [sys.executable, 'tools/gpu/check_benchmark.py', str(results)],
            capture_output=True, text=True, timeout=60, cwd=repo_root)
        assert proc.returncode == expected, proc.stdout
    assert 'swin_t [1600, 2688] fwdbwd timeout over 60 s' in proc.stdout
    assert '1 of 2 cases ran' in proc.stdout
