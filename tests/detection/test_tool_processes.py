"""The tool server: a forked run behaves as ``python script args`` would.

The scripts here import nothing heavy, so the fresh-interpreter cases cost
little.
"""
import json
import os
import os.path as osp
import signal
import subprocess
import sys
import textwrap

import pytest
from detection_utils import REPO_ROOT, run_tool, tool_env
from tool_processes import ForkedProcess, start_python_tool

PROBE = textwrap.dedent('''
    import json, os, sys
    import numpy, torch
    print(json.dumps(dict(
        argv=sys.argv, cwd=os.getcwd(), path0=sys.path[0],
        variable=os.environ.get('PROBE_VARIABLE'),
        mmlaplacian='mmlaplacian' in sys.modules,
        numpy=numpy.random.randint(1 << 30),
        torch=torch.randint(1 << 30, ()).item())))
    import atexit
    atexit.register(lambda: print('exit handler ran'))
    if sys.argv[1:] == ['raise']:
        raise ValueError('raised by the probe')
    if sys.argv[1:] == ['exit']:
        sys.exit('the probe exits')
    if sys.argv[1:] == ['wait']:
        import time
        time.sleep(120)
''')


@pytest.fixture()
def probe(tmp_path) -> str:
    path = tmp_path / 'probe.py'
    path.write_text(PROBE)
    return str(path)


def run(probe: str, tmp_path, *args: str, **env: str):
    output = str(tmp_path / 'output.txt')
    proc = start_python_tool([probe, *args], REPO_ROOT, tool_env(**env),
                             output)
    returncode = proc.wait(60)
    with open(output, encoding='utf-8') as f:
        return proc, returncode, f.read()


def test_a_forked_run_gets_its_arguments_directory_and_environment(
        probe, tmp_path):
    proc, returncode, out = run(probe, tmp_path, 'a', '--b',
                                PROBE_VARIABLE='set')
    assert isinstance(proc, ForkedProcess)
    assert returncode == 0
    first = json.loads(out.splitlines()[0])
    assert first['argv'] == [probe, 'a', '--b']
    assert first['cwd'] == REPO_ROOT
    assert first['path0'] == osp.dirname(probe)
    assert first['variable'] == 'set'
    assert first['mmlaplacian'] is False  # each tool imports it itself
    assert out.splitlines()[-1] == 'exit handler ran'


def test_forked_runs_draw_different_random_numbers(probe, tmp_path):
    first, second = (json.loads(run(probe, tmp_path)[2].splitlines()[0])
                     for _ in range(2))
    assert first['numpy'] != second['numpy']
    assert first['torch'] != second['torch']


def test_exit_statuses_and_tracebacks_are_a_fresh_interpreters(
        probe, tmp_path):
    _, returncode, out = run(probe, tmp_path, 'raise')
    fresh = subprocess.run([sys.executable, probe, 'raise'], cwd=REPO_ROOT,
                           env=tool_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    assert returncode == fresh.returncode == 1
    def traceback(text):
        text = text[text.index('Traceback'):]
        return text[:text.index('ValueError: raised by the probe')]

    assert traceback(out).splitlines()[1] == (
        f'  File "{probe}", line 13, in <module>')
    assert traceback(out) == traceback(fresh.stdout)
    assert 'exit handler ran' in out

    _, returncode, out = run(probe, tmp_path, 'exit')
    assert returncode == 1
    assert 'the probe exits' in out


def test_a_killed_run_reports_the_signal(probe, tmp_path):
    output = str(tmp_path / 'output.txt')
    proc = start_python_tool([probe, 'wait'], REPO_ROOT, tool_env(), output)
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.2)
    proc.kill()
    assert proc.wait(60) == -signal.SIGKILL


def test_other_startup_variables_get_a_fresh_interpreter(probe, tmp_path):
    proc, returncode, out = run(probe, tmp_path, OMP_NUM_THREADS='1')
    assert isinstance(proc, subprocess.Popen)
    assert returncode == 0 and 'exit handler ran' in out


def test_a_file_size_limit_holds_in_the_tool(tmp_path):
    script = tmp_path / 'write.py'
    script.write_text("open(__import__('sys').argv[1], 'wb').write("
                      "b'x' * 100_000)\n")
    output = str(tmp_path / 'output.txt')
    proc = start_python_tool([str(script), str(tmp_path / 'big')], REPO_ROOT,
                             tool_env(), output, file_size_limit=50_000)
    assert proc.wait(60) != 0
    assert os.path.getsize(tmp_path / 'big') == 50_000


def test_run_tool_reports_a_failing_tool(probe, tmp_path):
    with pytest.raises(AssertionError, match='raised by the probe'):
        run_tool([probe, 'raise'])
