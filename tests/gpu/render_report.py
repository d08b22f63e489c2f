"""Write the markdown report of ``tools/gpu_check.sh`` from its outputs.

Reads, in ``--out-dir``: ``steps.tsv`` (step, result, seconds), ``env.txt``,
``logs/<step>.log``, ``figures.jsonl`` (written by the tests in tests/gpu)
and ``benchmark_backbone/benchmark.md``; prints the report to stdout.
"""
from __future__ import annotations

import argparse
import json
import os.path as osp
import re
from typing import List

FAILED_TAIL = 40  # log lines shown for a failed step


def read(path: str) -> str:
    if not osp.isfile(path):
        return ''
    with open(path, encoding='utf-8', errors='replace') as f:
        return f.read()


def code_block(text: str) -> str:
    return '```\n' + text.rstrip() + '\n```\n'


def steps_table(out_dir: str) -> List[str]:
    lines = ['| step | result | seconds |', '|---|---|---:|']
    rows = [r.split('\t') for r in read(osp.join(out_dir, 'steps.tsv'))
            .splitlines() if r.strip()]
    lines += [f'| {name} | {result} | {took} |' for name, result, took in rows]
    return lines


def failed_steps(out_dir: str) -> List[str]:
    rows = [r.split('\t') for r in read(osp.join(out_dir, 'steps.tsv'))
            .splitlines() if r.strip()]
    return [name for name, result, _ in rows if result.startswith('FAILED')]


def figures_table(out_dir: str) -> List[str]:
    text = read(osp.join(out_dir, 'figures.jsonl'))
    if not text:
        return ['No figures were recorded (the GPU tests did not run).']
    lines = ['| check | figure | value | bound |', '|---|---|---|---|']
    for raw in text.splitlines():
        item = json.loads(raw)
        bound = '' if item['bound'] is None else item['bound']
        lines.append(f'| {item["check"]} | {item["metric"]} | '
                     f'{item["value"]} | {bound} |')
    return lines


def pytest_section(log: str) -> List[str]:
    if not log:
        return ['Not run.']
    wanted = re.compile(r'^(FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b')
    outcome = [ln for ln in log.splitlines() if wanted.match(ln)]
    summary = [ln for ln in log.splitlines()
               if re.search(r'\b(passed|failed|error)\b.* in [\d.]+s', ln)]
    lines = [f'Summary: `{summary[-1].strip("= ")}`' if summary else
             'No pytest summary line (see logs/pytest.log).', '']
    if outcome:
        lines += ['Failures and skips:', code_block('\n'.join(outcome))]
    durations = re.search(r'slowest \d+ durations =+\n(.*?)(?:\n\n|\n=)',
                          log, re.S)
    if durations:
        lines += ['Slowest tests:', code_block(durations.group(1))]
    return lines


def sanitizer_section(out_dir: str) -> List[str]:
    lines = []
    for tool in ('memcheck', 'racecheck'):
        log = read(osp.join(out_dir, 'logs', f'{tool}.log'))
        if not log:
            lines.append(f'- {tool}: not run (see the steps table).')
            continue
        keep = [ln.strip() for ln in log.splitlines()
                if 'SUMMARY' in ln or 'sanitizer cases' in ln]
        lines.append(f'- {tool}: ' + ('; '.join(keep) if keep else
                                      'no summary line (see its log)'))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--out-dir', required=True)
    parser.add_argument('--status', type=int, required=True)
    parser.add_argument('--seconds', type=int, required=True)
    args = parser.parse_args()
    out, logs = args.out_dir, osp.join(args.out_dir, 'logs')
    verdict = 'PASSED' if args.status == 0 else 'FAILED'
    parts = [
        '# mmlaplacian GPU acceptance report', '',
        f'Result: **{verdict}** in {args.seconds} s.', '',
        *steps_table(out), '', '## Environment',
        code_block(read(osp.join(out, 'env.txt'))), '## Build',
        code_block(read(osp.join(logs, 'cuda-kernels.log')) or 'not built'),
        '## Tests (tests/ops, tests/gpu)', *pytest_section(
            read(osp.join(logs, 'pytest.log'))), '',
        '## Figures measured by the tests', *figures_table(out), '',
        '## compute-sanitizer', *sanitizer_section(out), '',
        '## Op benchmark (benchmark_ops.py --device cuda)',
        read(osp.join(logs, 'benchmark-ops.log')) or 'Not run.', '',
        '## Backbone benchmark (benchmark_backbone.py, CUDA)',
        read(osp.join(out, 'benchmark_backbone', 'benchmark.md')) or
        'Not run or no tables written (see logs/benchmark-backbone.log).', ''
    ]
    for name in failed_steps(out):
        tail = read(osp.join(logs, f'{name}.log')).splitlines()[-FAILED_TAIL:]
        parts += [f'## Log tail of the failed step `{name}`',
                  code_block('\n'.join(tail))]
    print('\n'.join(parts))


if __name__ == '__main__':
    main()
