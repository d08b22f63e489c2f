"""Whether each CPU inference form of the backbone pays: time and memory.

    python -m benchmarks.forms --sizes 800x1344 1600x2688 --repeat 3

LaplacianFormer-T (random weights, eval, ``torch.no_grad()``, batch 1) runs
its forward on the plain path and with each form on (:data:`SETTINGS`).
The one form is the attention's ``mode``: ``'full'`` is the plain path,
``'auto'`` takes the chunked form of the attention and its block on the
CPU without autograd. Per size:

- **time**: one process builds one model per setting and runs their
  forwards in rounds, each setting once per round (the order rotates from
  round to round), after ``--warmup`` untimed rounds. A pass whose threads
  were not kept busy (other processes held the cores of a shared machine,
  :func:`~benchmarks.harness.threads_were_busy`) is left out; rounds go on
  until every setting has ``--repeat`` busy passes, or ``--max-rounds``.
  ``time s`` is the median of a setting's busy passes.
- **memory**: one fresh process per setting runs the forward twice; the
  first pass pages in the code and fills the kernels' caches, and the peak
  of the second is measured. ``Δpeak`` is its peak resident set minus the
  resident set before it: the activations and workspaces of the forward.
  glibc's ``malloc`` gets a fixed mmap threshold in that process
  (``MALLOC_MMAP_THRESHOLD_``), so that memory freed after the first pass
  goes back to the system instead of serving the second one unseen.

A form pays when it saves at least ``--min-saving`` (10%) of the plain
path's time or of its ``Δpeak`` at some size.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn as nn

from benchmarks.backbone import parse_size
from benchmarks.harness import (current_rss_mb, peak_rss_mb, reset_peak_rss,
                                run_in_subprocess, threads_were_busy,
                                time_passes, worker_main)
from benchmarks.tables import markdown_table

PLAIN = "mode='full' (plain)"
# The backbone's arguments for the plain path and for each form. The one
# form is the attention's chunked mode, which its block follows.
SETTINGS: Dict[str, dict] = {
    PLAIN: dict(attn_cfg=dict(mode='full')),
    "mode='auto' (chunked)": dict(attn_cfg=dict(mode='auto')),
}
# Every allocation from 128 KiB up is its own mapping, unmapped when freed:
# the resident set then follows the live tensors.
MEMORY_ENV = dict(MALLOC_MMAP_THRESHOLD_=str(2**17))


def build(setting: str) -> nn.Module:
    """LaplacianFormer-T (seeded, eval) built with ``SETTINGS[setting]``."""
    from mmlaplacian.models import LaplacianFormer
    torch.manual_seed(0)
    model = LaplacianFormer('tiny', **SETTINGS[setting])
    model.init_weights()
    return model.eval()


# ----------------------------------------------------------------- workers
def run_case(spec: dict) -> dict:
    """Worker: time every setting in rounds, or one setting's memory."""
    torch.set_num_threads(spec['threads'])
    image = torch.randn(1, 3, *spec['size'],
                        generator=torch.Generator().manual_seed(0))
    if spec['task'] == 'memory':
        model = build(spec['setting'])
        with torch.no_grad():
            model(image)
            reset_peak_rss()
            base_mb = current_rss_mb()
            model(image)
        return dict(spec, delta_mb=peak_rss_mb() - base_mb)
    models = {setting: build(setting) for setting in spec['settings']}
    names = list(models)
    busy: Dict[str, List[float]] = {name: [] for name in names}
    rounds = 0
    while rounds < spec['warmup'] + spec['max_rounds'] and any(
            len(times) < spec['repeats'] for times in busy.values()):
        shift = rounds % len(names)
        for name in names[shift:] + names[:shift]:
            with torch.no_grad():
                passes = time_passes([lambda: models[name](image)], 1)
            if rounds >= spec['warmup'] and threads_were_busy(
                    passes.cpu[0], passes.wall[0][0], spec['threads']):
                busy[name].append(passes.wall[0][0])
        rounds += 1
    return dict(spec, busy=busy, rounds=rounds - spec['warmup'])


# ------------------------------------------------------------------ parent
def measure(size: Sequence[int], args: argparse.Namespace) -> List[dict]:
    """One row per setting at ``size``: busy passes and memory."""
    names = list(SETTINGS)
    env = dict(OMP_NUM_THREADS=str(args.threads),
               MKL_NUM_THREADS=str(args.threads))
    spec = dict(size=list(size), threads=args.threads)
    timed = run_in_subprocess(
        'benchmarks.forms',
        dict(spec, task='time', settings=names, warmup=args.warmup,
             repeats=args.repeat, max_rounds=args.max_rounds),
        args.timeout, env)
    if timed['status'] != 'ok':
        sys.exit(f'timing at {size}: {timed["status"]}: '
                 f'{timed.get("message")}')
    rows = []
    for name in names:
        memory = run_in_subprocess(
            'benchmarks.forms', dict(spec, task='memory', setting=name),
            args.timeout, dict(env, **MEMORY_ENV))
        if memory['status'] != 'ok':
            sys.exit(f'memory of {name!r} at {size}: {memory["status"]}: '
                     f'{memory.get("message")}')
        times = timed['busy'][name]
        rows.append(dict(
            size=list(size), setting=name, times=times,
            rounds=timed['rounds'],
            seconds=statistics.median(times) if times else None,
            delta_mb=memory['delta_mb']))
        print(f'{size[0]}x{size[1]} {name}: busy passes '
              f'{[round(t, 2) for t in times]} of {timed["rounds"]}, Δpeak '
              f'{memory["delta_mb"]:.0f} MB', file=sys.stderr, flush=True)
    return rows


def format_table(rows: List[dict], args: argparse.Namespace) -> str:
    """The markdown table: each setting against the plain path, per size."""
    header = ['size', 'setting', 'time s', 'busy passes', 'time ×',
              'Δpeak MB', 'Δpeak ×', 'pays?']
    lines, pays_somewhere = [], {}
    for row in rows:
        plain = next(r for r in rows
                     if r['size'] == row['size'] and r['setting'] == PLAIN)
        ratios = [row['delta_mb'] / plain['delta_mb']]
        time_cells = ['—', '—']
        if row['seconds'] is not None and plain['seconds'] is not None:
            ratios.insert(0, row['seconds'] / plain['seconds'])
            time_cells = [f'{row["seconds"]:.2f}', f'{ratios[0]:.2f}']
        verdict = '—'
        if row['setting'] != PLAIN:
            pays = min(ratios) <= 1 - args.min_saving
            pays_somewhere[row['setting']] = pays or pays_somewhere.get(
                row['setting'], False)
            verdict = 'yes' if pays else 'no'
        lines.append([
            f'{row["size"][0]}×{row["size"][1]}', row['setting'],
            time_cells[0], f'{len(row["times"])}/{row["rounds"]}',
            time_cells[1], f'{row["delta_mb"]:.0f}', f'{ratios[-1]:.2f}',
            verdict
        ])
    caption = (
        'LaplacianFormer-T backbone forward (eval, `torch.no_grad()`, batch '
        f'1, random weights), {args.threads} threads on this '
        f'{os.cpu_count()}-core machine, shared with other work. time s: '
        'median wall seconds of the busy passes (busy passes: passes that '
        'kept their threads busy, of the rounds run; each round runs every '
        'setting once, in one process). Δpeak: peak RSS of a second pass '
        'minus the RSS before it, in a fresh process per row. ×: against '
        f'the plain path at that size. pays?: saves ≥ {args.min_saving:.0%} '
        'of time or of Δpeak.')
    paying = [name for name, pays in pays_somewhere.items() if pays]
    summary = ('Forms that pay at some size: ' +
               (', '.join(paying) if paying else 'none') + '.')
    return '\n\n'.join(
        [caption, markdown_table(header, lines, 'llrrrrrl'), summary])


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--sizes', nargs='+', type=parse_size,
                        default=[(800, 1344), (1600, 2688)],
                        help='input sizes HxW, batch 1')
    parser.add_argument('--repeat', type=int, default=3,
                        help='busy passes per setting (median)')
    parser.add_argument('--max-rounds', type=int, default=None,
                        help='rounds at most (default: 3 × --repeat)')
    parser.add_argument('--warmup', type=int, default=1,
                        help='untimed rounds first')
    parser.add_argument('--threads', type=int, default=2,
                        help='torch.set_num_threads in every process')
    parser.add_argument('--min-saving', type=float, default=0.10,
                        help='share of time or Δpeak a form must save')
    parser.add_argument('--timeout', type=float, default=1800.,
                        help='seconds per process before giving up')
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.warmup < 0:
        parser.error('--repeat must be >= 1 and --warmup >= 0')
    if args.max_rounds is None:
        args.max_rounds = 3 * args.repeat
    return args


def main(argv: Optional[Sequence[str]] = None) -> List[dict]:
    """Measure every setting at every size, print the table and return its
    rows (:func:`measure`); a worker prints its result instead."""
    args = parse_args(argv)
    if args.worker:
        worker_main(run_case, args.worker)
        return []
    rows = [row for size in args.sizes for row in measure(size, args)]
    print(format_table(rows, args))
    return rows


if __name__ == '__main__':
    main()
