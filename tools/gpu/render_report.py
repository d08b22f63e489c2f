"""Write the markdown report of ``tools/gpu_check.sh`` from its work folder.

Reads, in ``--work``: ``steps.tsv`` (step, result, seconds), ``probe.txt``,
``logs/<step>.log``, ``figures.jsonl`` (written by the tests in tests/gpu)
and ``benchmark_backbone/benchmark.md``; prints the report to stdout.
gpu_check.sh renders it after every step (``--status running``) and once
more at the end, so that a run cut off at any point leaves one behind.
"""
from __future__ import annotations

import argparse
import json
import os.path as osp
import re
from typing import List

FAILED_TAIL = 40  # log lines shown for a failed step
LINE_LIMIT = 300  # characters kept of a log line (compiler lines run to 10k)
# What the mmcv section keeps of build_mmcv.sh's log: its own lines, the
# check's stages and, after a crash, faulthandler's and gdb's stacks.
MMCV_LINES = re.compile(
    r'^(build_mmcv:|mmcv |mmengine |check:|Fatal Python error|'
    r'Current thread|Thread 0x|\s+File "|#\d+\s|Program received signal)'
    r'|Segmentation fault')
SANITIZERS = ('memcheck', 'racecheck', 'initcheck', 'synccheck')
# The order of gpu_check.sh (steps run side by side end in any order).
ORDER = ('wheels', 'probe', 'mmcv', 'build', 'cuda-kernels', 'ops-tests',
         'sanitizer-selftest', *SANITIZERS, 'model-tests', 'amp-tests',
         'benchmark-ops', 'benchmark-backbone', 'benchmark-cases')
PYTEST_STEPS = (('ops-tests', 'tests/ops, tests/gpu/test_gpu_build.py'),
                ('sanitizer-selftest', 'tests/gpu/test_broken_kernels.py'),
                ('model-tests', 'tests/gpu/test_gpu_models.py'),
                ('amp-tests', 'tests/gpu/test_gpu_amp.py'))
VERDICTS = {
    '0': 'PASSED',
    '1': 'FAILED',
    '2': 'NOT RUN',
    '3': 'INCOMPLETE (nothing failed, but not every check could run here)',
    'running': 'IN PROGRESS: written after the last step that finished; '
               'the final report replaces it unless the run is cut off',
}
# A pytest closing line: "3 passed, 1 skipped in 2.1s", "2 errors in 0.5s".
PYTEST_SUMMARY = re.compile(
    r'\b(\d+ (passed|failed|errors?|skipped|xfailed|xpassed|deselected|'
    r'warnings?)|no tests ran)\b.* in [\d.]+s')


def read(path: str) -> str:
    if not osp.isfile(path):
        return ''
    with open(path, encoding='utf-8', errors='replace') as f:
        return f.read()


def ran(log: str) -> bool:
    """Whether a step's log holds more than its command line."""
    return bool(log.partition('\n')[2].strip())


def shorten(line: str) -> str:
    return line if len(line) <= LINE_LIMIT else line[:LINE_LIMIT] + ' [...]'


def code_block(text: str) -> str:
    return '```\n' + text.rstrip() + '\n```\n'


def step_rows(work: str) -> List[List[str]]:
    rows = [r.split('\t') for r in read(osp.join(work, 'steps.tsv'))
            .splitlines() if r.count('\t') == 2]
    return sorted(rows, key=lambda r: ORDER.index(r[0]) if r[0] in ORDER
                  else len(ORDER))


def steps_table(rows: List[List[str]]) -> List[str]:
    lines = ['| step | result | seconds |', '|---|---|---:|']
    return lines + [f'| {n} | {r} | {t} |' for n, r, t in rows]


def figures_table(work: str) -> List[str]:
    text = read(osp.join(work, 'figures.jsonl'))
    if not text:
        return ['No figures were recorded (the GPU tests did not run).']
    lines = ['| check | figure | value | bound |', '|---|---|---|---|']
    # A test run by two steps (cuda-kernels, ops-tests) records twice.
    for raw in dict.fromkeys(text.splitlines()):
        try:
            item = json.loads(raw)
        except ValueError:  # a line cut off by a killed test
            continue
        bound = '' if item.get('bound') is None else item['bound']
        lines.append(f'| {item["check"]} | {item["metric"]} | '
                     f'{item["value"]} | {bound} |')
    return lines


def pytest_section(log: str, name: str) -> List[str]:
    if not ran(log):
        return ['Not run.']
    lines = log.splitlines()
    wanted = re.compile(r'^(FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b')
    outcome = [ln for ln in lines if wanted.match(ln)]
    summary = [ln for ln in lines if PYTEST_SUMMARY.search(ln)]
    parts = [f'Summary: `{summary[-1].strip("= ")}`' if summary else
             f'No pytest summary line (see logs/{name}.log).', '']
    if outcome:
        parts += ['Failures and skips:', code_block('\n'.join(outcome))]
    durations = re.search(r'slowest \d+ durations =+\n(.*?)(?:\n\n|\n=)',
                          log, re.S)
    if durations:
        parts += ['Slowest tests:', code_block(durations.group(1))]
    return parts


def sanitizer_section(work: str) -> List[str]:
    lines = []
    for tool in SANITIZERS:
        log = read(osp.join(work, 'logs', f'{tool}.log'))
        if not ran(log):
            lines.append(f'- {tool}: not run (see the steps table).')
            continue
        keep = [ln.strip('= ').strip() for ln in log.splitlines()
                if 'SUMMARY' in ln or ln.startswith(('sanitize:',
                                                     'sanitizer cases'))]
        lines.append(f'- {tool}: ' + ('; '.join(keep) if keep else
                                      f'no summary line (logs/{tool}.log)'))
    return lines


def markdown_only(log: str) -> str:
    """The tables and headings a tool printed, without its warnings."""
    keep = [ln for ln in log.splitlines() if ln.startswith(('|', '#'))]
    return '\n'.join(keep) if keep else 'No tables (see the log).'


def headline(args, rows) -> List[str]:
    if args.dry_run == '1':
        verdict = ('DRY RUN: not a pass. The probe and this report ran for '
                   'real; every step was only resolved (its program and '
                   'files found), none was run, and nothing here comes from '
                   'a GPU')
        if args.status not in ('0', 'running'):
            verdict += '; a step did not resolve'
    else:
        verdict = VERDICTS.get(args.status, f'exit {args.status}')
    lines = [f'Result: **{verdict}** after {args.seconds} s.', '']
    if args.not_run:
        lines += [f'Not run: {args.not_run}', '']
    if args.interrupted:
        lines += [f'Interrupted by {args.interrupted}: the steps still '
                  'running were stopped.', '']
    return lines + steps_table(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--work', required=True)
    parser.add_argument('--status', required=True,
                        help="gpu_check.sh's exit status, or 'running'")
    parser.add_argument('--dry-run', default='0')
    parser.add_argument('--seconds', type=int, required=True)
    parser.add_argument('--not-run', default='')
    parser.add_argument('--interrupted', default='')
    args = parser.parse_args()
    work, logs = args.work, osp.join(args.work, 'logs')
    rows = step_rows(work)
    parts = ['# mmlaplacian GPU acceptance report', '',
             *headline(args, rows), '', '## Environment (probe)',
             code_block(read(osp.join(work, 'probe.txt')) or 'no probe')]
    if args.dry_run == '1':
        commands = [read(osp.join(logs, f'{n}.log')).split('\n')[0]
                    for n, _, _ in rows]
        parts += ['## The commands each step would run',
                  code_block('\n'.join(c for c in commands if c))]
    parts += ['## mmcv', code_block('\n'.join(
        shorten(ln) for ln in read(osp.join(logs, 'mmcv.log')).splitlines()
        if MMCV_LINES.search(ln)) or 'not built here')]
    for name, what in PYTEST_STEPS:
        parts += [f'## Tests: {what}',
                  *pytest_section(read(osp.join(logs, f'{name}.log')), name),
                  '']
    bench = read(osp.join(logs, 'benchmark-ops.log'))
    parts += ['## Figures measured by the tests', *figures_table(work), '',
              '## compute-sanitizer (tests/gpu/sanitizer_cases.py)',
              *sanitizer_section(work), '',
              '## Op benchmark (python -m benchmarks.ops --device cuda)',
              markdown_only(bench) if ran(bench) else 'Not run.',
              '', '## Backbone benchmark (python -m benchmarks.backbone, CUDA)',
              read(osp.join(work, 'benchmark_backbone', 'benchmark.md')) or
              'Not run, or no tables written.', '']
    for name, result, _ in rows:
        if result.startswith('FAILED') and not args.dry_run == '1':
            # pytest's captured torch.compile DEBUG logs say nothing here.
            tail = [shorten(ln) for ln in read(osp.join(
                logs, f'{name}.log')).splitlines()
                    if not ln.startswith('DEBUG ')]
            parts += [f'## Log tail of the failed step `{name}`',
                      code_block('\n'.join(tail[-FAILED_TAIL:]))]
    print('\n'.join(parts))


if __name__ == '__main__':
    main()
