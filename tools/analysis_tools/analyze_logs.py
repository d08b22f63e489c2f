"""Plot training curves and summarise training time from mmengine logs.

Reads the scalar logs mmengine writes to ``<work_dir>/<timestamp>/vis_data/``
(``scalars.json`` or ``<timestamp>.json``: one JSON object per line; training
lines carry ``loss*``/``lr``/``time``, validation lines carry ``coco/...``).

Examples:
    python tools/analysis_tools/analyze_logs.py plot_curve \
        work_dirs/lf_tiny_1x/*/vis_data/scalars.json \
        --keys loss loss_cls --out loss.png
    python tools/analysis_tools/analyze_logs.py plot_curve A.json B.json \
        --keys coco/bbox_mAP --legend run_a run_b --out map.png
    python tools/analysis_tools/analyze_logs.py cal_train_time LOG.json
"""
import argparse
import json
import os.path as osp
import sys
from typing import Dict, List, Sequence

import numpy as np


def load_scalars(path: str) -> Dict[str, List[tuple]]:
    """Series per key: ``key -> [(step, value), ...]`` in file order.

    Training lines are indexed by their ``iter``; validation lines (no
    ``iter``) by their ``step`` (the epoch, or the iteration in iteration-
    based training).
    """
    if not osp.isfile(path):
        raise FileNotFoundError(f'log file not found: {path}')
    series: Dict[str, List[tuple]] = {}
    with open(path, encoding='utf-8') as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f'{path}:{number}: not a JSON line '
                                 f'({err.msg})') from err
            step = record.get('iter', record.get('step'))
            for key, value in record.items():
                if isinstance(value, (int, float)) and key not in (
                        'iter', 'step', 'epoch'):
                    series.setdefault(key, []).append((step, float(value)))
    return series


def run_name(path: str) -> str:
    """The work-dir name of ``<work_dir>/<timestamp>/vis_data/x.json``."""
    folder = osp.dirname(osp.abspath(path))
    if osp.basename(folder) == 'vis_data':
        return osp.basename(osp.dirname(osp.dirname(folder)))
    return osp.basename(path)


def plot_curve(args: argparse.Namespace) -> None:
    """Draw one line per (log, key) and save the figure."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    legends = args.legend or [
        f'{run_name(p)}: {k}' for p in args.json_logs for k in args.keys
    ]
    if len(legends) != len(args.json_logs) * len(args.keys):
        sys.exit(f'--legend needs {len(args.json_logs) * len(args.keys)} '
                 f'names (logs x keys), got {len(legends)}')
    fig, ax = plt.subplots(figsize=(8, 5))
    names = iter(legends)
    for path in args.json_logs:
        series = load_scalars(path)
        for key in args.keys:
            if key not in series:
                sys.exit(f'{path} has no key {key!r}; available: '
                         f'{", ".join(sorted(series))}')
            steps, values = zip(*series[key])
            ax.plot(steps, values, label=next(names), linewidth=1.2,
                    marker='o' if len(values) < 30 else None)
    ax.set_xlabel('iteration (training keys) / validation step')
    ax.set_title(args.title or ', '.join(args.keys))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f'saved {args.out}')


def cal_train_time(args: argparse.Namespace) -> None:
    """Print the mean, slowest and fastest iteration times of each log."""
    for path in args.json_logs:
        times = np.array([v for _, v in load_scalars(path).get('time', [])])
        if times.size == 0:
            sys.exit(f'{path} has no "time" entries (not a training log?)')
        times = times[args.skip:] if times.size > args.skip else times
        print(f'{path}\n'
              f'  intervals logged : {times.size}\n'
              f'  mean s/iter      : {times.mean():.4f}\n'
              f'  slowest s/iter   : {times.max():.4f}\n'
              f'  fastest s/iter   : {times.min():.4f}\n'
              f'  std              : {times.std():.4f}')


def parse_args(argv: Sequence[str] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Analyse mmengine logs')
    sub = parser.add_subparsers(dest='task', required=True)
    curve = sub.add_parser('plot_curve', help='plot curves of scalars')
    curve.add_argument('json_logs', nargs='+', help='vis_data json logs')
    curve.add_argument(
        '--keys', nargs='+', default=['loss'], help='scalars to plot')
    curve.add_argument('--legend', nargs='+', help='one name per line')
    curve.add_argument('--title', help='figure title')
    curve.add_argument('--out', default='curves.png', help='output image')
    curve.set_defaults(func=plot_curve)
    timing = sub.add_parser('cal_train_time', help='iteration time summary')
    timing.add_argument('json_logs', nargs='+', help='vis_data json logs')
    timing.add_argument(
        '--skip', type=int, default=1,
        help='leading logged intervals to ignore (warm-up)')
    timing.set_defaults(func=cal_train_time)
    return parser.parse_args(argv)


def main(argv: Sequence[str] = None) -> None:
    args = parse_args(argv)
    args.func(args)


if __name__ == '__main__':
    main()
