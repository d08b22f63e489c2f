"""Kernel ablation: the same small detector with three attention arms.

Trains the quick-start Mask R-CNN (LaplacianFormer-Tiny, synthetic shapes;
``configs/quickstart/mask_rcnn_lf_tiny_synthetic.py``) with ``tools/train.py``
once per (seed, arm), same budget, evaluates box/mask AP on the validation
split at the end, and overlays the loss curves. Arms (stages 1–3; stage 4 is
softmax in all of them):

* ``laplacian``: ``attn_cfg.kernel='laplacian'`` (the default model);
* ``gaussian``: ``attn_cfg.kernel='gaussian'`` (SOFT's kernel, same λ, same
  Nyström/Newton–Schulz/whitening pipeline);
* ``softmax``: ``linear_attention='softmax'`` (quadratic attention).

Runs that already finished (their metrics are in the work directory) are
not trained again; ``--report-only`` only collects, plots and tabulates.

Output in ``--work-dir``: one sub-folder per run, ``loss_curves.png``,
``ablation.md`` (AP table) and ``ablation.json``.

Example:
    python -m benchmarks.kernel_ablation --seeds 0 1 --epochs 4 \\
        --work-dir work_dirs/kernel_ablation
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import os.path as osp
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

from benchmarks.harness import REPO_ROOT
from benchmarks.tables import markdown_table

DEFAULT_CONFIG = 'configs/quickstart/mask_rcnn_lf_tiny_synthetic.py'
ARMS: Dict[str, List[str]] = {
    'laplacian': ['model.backbone.attn_cfg.kernel=laplacian'],
    'gaussian': ['model.backbone.attn_cfg.kernel=gaussian'],
    'softmax': ['model.backbone.linear_attention=softmax'],
}
METRICS = ('coco/bbox_mAP', 'coco/bbox_mAP_50', 'coco/segm_mAP',
           'coco/segm_mAP_50')


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Train the quick-start detector with each attention arm')
    parser.add_argument('--config', default=DEFAULT_CONFIG)
    parser.add_argument(
        '--arms', nargs='+', default=list(ARMS), choices=list(ARMS))
    parser.add_argument('--seeds', type=int, nargs='+', default=[0])
    parser.add_argument(
        '--epochs', type=int, default=4, help='training epochs per run')
    parser.add_argument(
        '--data', default='data/synthetic_coco',
        help='synthetic COCO folder (generated when incomplete)')
    parser.add_argument('--num-train', type=int, default=200)
    parser.add_argument('--num-val', type=int, default=50)
    parser.add_argument(
        '--image-size', type=int, default=192,
        help='image side of the generated data (the quick start uses 192)')
    parser.add_argument('--work-dir', default='work_dirs/kernel_ablation')
    parser.add_argument(
        '--log-interval', type=int, default=5, help='iterations per log line')
    parser.add_argument(
        '--threads', type=int, default=None,
        help='OMP_NUM_THREADS of the training runs (default: torch decides)')
    parser.add_argument(
        '--cfg-options', nargs='+', default=[],
        help='extra key=value overrides for every run')
    parser.add_argument(
        '--report-only', action='store_true',
        help='collect the finished runs; train nothing')
    parser.add_argument(
        '--smooth', type=int, default=5,
        help='moving-average window of the plotted loss (log points)')
    args = parser.parse_args(argv)
    args.config = osp.abspath(args.config)
    args.data = osp.abspath(args.data)
    return args


# -------------------------------------------------------------- training
def ensure_data(args: argparse.Namespace) -> None:
    """Generate the synthetic dataset unless a complete one of this image
    size and seed is there."""
    # Importable as a namespace package: benchmarks run from the repo root.
    from mmlaplacian.synthetic_data.instances import is_complete
    if is_complete(args.data, args.image_size, 0):
        return
    subprocess.run([
        sys.executable, 'tools/dataset_converters/make_synthetic_coco.py',
        '--out', args.data, '--train', str(args.num_train), '--val',
        str(args.num_val), '--size', str(args.image_size), '--seed', '0'
    ], cwd=REPO_ROOT, check=True)


def run_dir(args: argparse.Namespace, arm: str, seed: int) -> str:
    return osp.join(args.work_dir, f'{arm}_seed{seed}')


def latest_scalars(work_dir: str) -> Optional[str]:
    """The newest ``<timestamp>/vis_data/scalars.json`` holding AP."""
    paths = sorted(glob.glob(osp.join(work_dir, '*', 'vis_data',
                                      'scalars.json')))
    for path in reversed(paths):
        if any('coco/bbox_mAP' in line for line in open(path)):
            return path
    return None


def train(args: argparse.Namespace, arm: str, seed: int) -> float:
    """Train and evaluate one run; returns its wall time in seconds."""
    epochs = args.epochs
    options = ARMS[arm] + [
        f'randomness.seed={seed}',
        f'train_cfg.max_epochs={epochs}',
        f'train_cfg.val_interval={epochs}',
        f'default_hooks.checkpoint.interval={epochs}',
        f'default_hooks.logger.interval={args.log_interval}',
    ] + list(args.cfg_options)
    cmd = [
        sys.executable, 'tools/train.py', args.config, '--work-dir',
        osp.abspath(run_dir(args, arm, seed)), '--cfg-options'
    ] + options
    env = dict(os.environ, SYNTHETIC_COCO=args.data)
    if args.threads:
        env['OMP_NUM_THREADS'] = str(args.threads)
    start = time.perf_counter()
    with open(osp.join(run_dir(args, arm, seed), 'train_stdout.log'),
              'w') as log:
        subprocess.run(cmd, cwd=REPO_ROOT, env=env, check=True, stdout=log,
                       stderr=subprocess.STDOUT)
    return time.perf_counter() - start


# ------------------------------------------------------------- reporting
def load_scalars(path: str) -> Dict[str, List[tuple]]:
    """Series per key of an mmengine ``scalars.json``: ``key -> [(step,
    value), ...]`` in file order. Training lines are indexed by their
    ``iter``, validation lines (no ``iter``) by their ``step``."""
    series: Dict[str, List[tuple]] = {}
    with open(path, encoding='utf-8') as f:
        for line in f:
            if not line.strip():
                continue
            record = json.loads(line)
            step = record.get('iter', record.get('step'))
            for key, value in record.items():
                if isinstance(value, (int, float)) and key not in (
                        'iter', 'step', 'epoch'):
                    series.setdefault(key, []).append((step, float(value)))
    return series


def read_run(path: str) -> dict:
    """Loss curve ``[(iteration, loss), ...]`` and final :data:`METRICS`
    of one run (the last value logged of each)."""
    series = load_scalars(path)
    # Only training lines log ``loss`` (validation's is ``val_loss``), so
    # its series is the training curve, indexed by iteration.
    metrics = {key: series[key][-1][1] for key in METRICS if key in series}
    return dict(curve=series.get('loss', []), metrics=metrics)


def moving_average(values: List[float], window: int) -> List[float]:
    out = []
    for index in range(len(values)):
        chunk = values[max(0, index - window + 1):index + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def plot_curves(runs: List[dict], window: int, path: str) -> None:
    """Loss against iteration; colour = arm, line style = seed."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    arms = list(dict.fromkeys(r['arm'] for r in runs))
    seeds = list(dict.fromkeys(r['seed'] for r in runs))
    styles = ['-', '--', ':', '-.']
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        if not run['curve']:
            continue
        iters, losses = zip(*run['curve'])
        ax.plot(iters, moving_average(list(losses), window),
                color=f'C{arms.index(run["arm"])}',
                ls=styles[seeds.index(run['seed']) % len(styles)],
                label=f'{run["arm"]}, seed {run["seed"]}')
    ax.set_xlabel('iteration')
    ax.set_ylabel(f'total loss (moving average of {window} log points)')
    ax.grid(True, which='both', alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def format_table(runs: List[dict]) -> str:
    """Markdown: one row per seed, AP columns per arm side by side."""
    header = ['seed', 'arm', 'box AP', 'box AP50', 'mask AP', 'mask AP50',
              'final loss', 'train+eval time']
    rows = []
    for run in runs:
        m = run['metrics']
        final = run['curve'][-5:]
        final_loss = (sum(v for _, v in final) / len(final)) if final else 0
        cells = [str(run['seed']), run['arm']] + [
            f'{100 * m[k]:.1f}' if k in m else '—' for k in METRICS
        ] + [f'{final_loss:.3f}',
             f'{run["seconds"] / 60:.1f} min' if run['seconds'] else '—']
        rows.append(cells)
    arms = list(dict.fromkeys(r['arm'] for r in runs))
    if len({r['seed'] for r in runs}) > 1:
        for arm in arms:
            mine = [r['metrics'] for r in runs if r['arm'] == arm]
            cells = ['mean', arm] + [
                f'{100 * sum(m.get(k, 0) for m in mine) / len(mine):.1f}'
                for k in METRICS
            ] + ['', '']
            rows.append(cells)
    return markdown_table(header, rows) + '\n'


def main(argv: Optional[Sequence[str]] = None) -> List[dict]:
    args = parse_args(argv)
    os.makedirs(args.work_dir, exist_ok=True)
    if not args.report_only:
        ensure_data(args)
    plan = [(seed, arm) for seed in args.seeds for arm in args.arms]
    timing_path = osp.join(args.work_dir, 'timings.json')
    timings = json.load(open(timing_path)) if osp.isfile(timing_path) else {}
    for index, (seed, arm) in enumerate(plan, 1):
        name = f'{arm}_seed{seed}'
        if args.report_only or latest_scalars(run_dir(args, arm, seed)):
            continue
        os.makedirs(run_dir(args, arm, seed), exist_ok=True)
        print(f'[{index}/{len(plan)}] training {name} ({args.epochs} '
              f'epochs) ...', flush=True)
        timings[name] = train(args, arm, seed)
        with open(timing_path, 'w') as f:
            json.dump(timings, f, indent=1)
        print(f'[{index}/{len(plan)}] {name} done in '
              f'{timings[name] / 60:.1f} min', flush=True)

    runs = []
    for seed, arm in plan:
        path = latest_scalars(run_dir(args, arm, seed))
        if path is None:
            print(f'missing: {arm}_seed{seed} has no evaluated run')
            continue
        runs.append(dict(arm=arm, seed=seed, scalars=path,
                         seconds=timings.get(f'{arm}_seed{seed}'),
                         **read_run(path)))
    if not runs:
        sys.exit('no finished runs to report')
    table = format_table(runs)
    print(table)
    with open(osp.join(args.work_dir, 'ablation.md'), 'w') as f:
        f.write(table)
    with open(osp.join(args.work_dir, 'ablation.json'), 'w') as f:
        json.dump(dict(args=vars(args), runs=runs), f, indent=1)
    png = osp.join(args.work_dir, 'loss_curves.png')
    plot_curves(runs, args.smooth, png)
    print(f'wrote {png}, ablation.md, ablation.json')
    return runs


if __name__ == '__main__':
    main()
