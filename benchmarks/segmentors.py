"""Whole-segmentor forward time and memory, several models side by side.

Each (model, size) case runs in its own process (``benchmarks.harness``), and
the cases are interleaved round after round, so a slower or busier stretch
of a shared machine falls on every model alike. A forward is timed in two
phases: backbone + neck (``extract_feat``) and the decode head; the logits
stay at the head's 1/4 resolution (resizing them to the input is the same
work for every model). Random weights: the speed does not depend on them.

The default models are mmseg's own configs: LaplacianFormer-T Semantic FPN
(``configs/sem_fpn``), Swin-T UperNet (``mmseg::swin``) and PVTv2-b1 Semantic
FPN (mmseg's ``fpn_r50`` model with mmdet's PVTv2-b1 backbone, as in PVT's
recipe; mmseg ships no PVT config), all with 150 ADE20K classes.

Example:
    python -m benchmarks.segmentors \
        --sizes 512x512 512x2048 --threads 2 --markdown
"""
from __future__ import annotations

import argparse
import json
import os
import os.path as osp
from typing import Dict, List, Sequence


from benchmarks.harness import (busy_cores, peak_rss_mb,
                               run_in_subprocess, time_passes,
                               wait_for_idle, worker_main)
from benchmarks.tables import markdown_table

REPO_ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
# name -> (config, extra overrides). PVTv2-b1: PVT's Semantic FPN.
MODELS: Dict[str, tuple] = {
    'lf_tiny_fpn': (osp.join(REPO_ROOT, 'configs', 'sem_fpn',
                             'lf_tiny_fpn_40k_ade20k.py'), {}),
    'swin_tiny_upernet': (
        'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_'
        '8xb2-160k_ade20k-512x512.py', {}),
    'pvtv2_b1_fpn': (
        'mmseg::sem_fpn/fpn_r50_4xb4-160k_ade20k-512x512.py', {
            'model.backbone': dict(
                _delete_=True,
                type='mmdet.PyramidVisionTransformerV2',
                embed_dims=64,
                num_layers=[2, 2, 2, 2]),
            'model.pretrained': None,
            'model.neck.in_channels': [64, 128, 320, 512],
        }),
}
LABELS = {
    'lf_tiny_fpn': 'LaplacianFormer-T Semantic FPN',
    'swin_tiny_upernet': 'Swin-T UperNet',
    'pvtv2_b1_fpn': 'PVTv2-b1 Semantic FPN',
}


def parse_size(text: str) -> List[int]:
    try:
        height, width = (int(v) for v in text.lower().split('x'))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f'size must be HxW (e.g. 512x2048), got {text!r}') from None
    return [height, width]


def parse_args(argv: Sequence[str] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Segmentor forward time and memory, side by side')
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    parser.add_argument(
        '--models', nargs='+', default=list(MODELS), choices=list(MODELS))
    parser.add_argument(
        '--sizes', nargs='+', type=parse_size,
        default=[[512, 512], [512, 2048]], help='HxW inputs')
    parser.add_argument(
        '--rounds', type=int, default=2,
        help='interleaved rounds (each model and size once per round)')
    parser.add_argument(
        '--passes', type=int, default=3, help='timed passes per case')
    parser.add_argument(
        '--warmup', type=int, default=1, help='untimed passes first')
    parser.add_argument(
        '--threads', type=int, default=2, help='torch CPU threads')
    parser.add_argument(
        '--timeout', type=float, default=600, help='seconds per case')
    parser.add_argument(
        '--wait-idle', type=float, default=0, metavar='SECONDS',
        help='before each case, wait up to this long until other processes '
        'use under 0.3 cores (a shared machine)')
    parser.add_argument('--json', help='write all results to this file')
    parser.add_argument('--markdown', action='store_true')
    return parser.parse_args(argv)


def run_case(spec: dict) -> dict:
    """Build one segmentor and time its forward (in a worker process)."""
    import torch
    torch.set_num_threads(spec['threads'])
    import mmlaplacian  # noqa: F401  (registers the backbone)
    from mmengine.config import Config
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS as SEG_MODELS
    config, overrides = MODELS[spec['model']]
    if config.startswith('mmseg::'):
        import mmseg
        config = osp.join(osp.dirname(mmseg.__file__), '.mim', 'configs',
                          config[len('mmseg::'):])
    cfg = Config.fromfile(config)
    cfg.merge_from_dict(overrides)
    init_default_scope('mmseg')
    cfg.model.backbone.init_cfg = None
    cfg.model.data_preprocessor = None  # random tensors go straight in
    cfg.model.pop('auxiliary_head', None)  # training only
    # SyncBN has no CPU kernel; one process normalises alike with BN.
    model = revert_sync_batchnorm(SEG_MODELS.build(cfg.model)).eval()
    params = sum(p.numel() for p in model.parameters()) / 1e6
    head_params = sum(p.numel()
                      for p in model.decode_head.parameters()) / 1e6
    height, width = spec['size']
    x = torch.randn(1, 3, height, width)
    with torch.no_grad():
        phases = [lambda: model.extract_feat(x),
                  lambda feats: model.decode_head(feats)]
        time_passes(phases, spec['warmup'])
        times = time_passes(phases, spec['passes'])
    return dict(
        spec,
        params_m=round(params, 2),
        head_params_m=round(head_params, 2),
        features_s=times.median(0),
        head_s=times.median(1),
        total_s=times.median(),
        # Process CPU seconds per forward: the work done, which other jobs
        # on a shared machine inflate far less than the wall time.
        cpu_s=times.median_cpu(),
        # CPU time over wall time: ~threads when none was starved.
        cpu_per_wall=round(times.median_cpu() / times.median(), 2),
        peak_rss_mb=round(peak_rss_mb()))


def main(argv: Sequence[str] = None) -> None:
    args = parse_args(argv)
    if args.worker:
        worker_main(run_case, args.worker)
        return
    # Sleeping, not spinning, OpenMP threads: spinning would count as CPU
    # time and steal the cores of the other case processes' neighbours.
    os.environ.setdefault('OMP_WAIT_POLICY', 'PASSIVE')
    busy = busy_cores()
    print(f'busy cores before the run: {busy:.1f}', flush=True)
    results: List[dict] = []
    for round_index in range(args.rounds):
        for size in args.sizes:
            for model in args.models:
                spec = dict(model=model, size=size, threads=args.threads,
                            passes=args.passes, warmup=args.warmup,
                            round=round_index)
                if args.wait_idle:
                    spec['busy_cores_before'] = round(
                        wait_for_idle(args.wait_idle, 0.3), 2)
                result = run_in_subprocess('benchmarks.segmentors', spec, args.timeout)
                results.append(result)
                print(json.dumps(result), flush=True)
    if args.json:
        with open(args.json, 'w', encoding='utf-8') as f:
            json.dump(dict(busy_cores_before=busy, results=results), f,
                      indent=1)
    if args.markdown:
        print(report(results, args))


def report(results: List[dict], args: argparse.Namespace) -> str:
    """One row per model and size: the best round's medians."""
    rows = []
    for size in args.sizes:
        for model in args.models:
            cases = [r for r in results if r['model'] == model
                     and r['size'] == size and r.get('status') == 'ok']
            label = f'{LABELS[model]} | {size[0]}×{size[1]}'
            if not cases:
                failed = [r for r in results if r['model'] == model
                          and r['size'] == size]
                status = failed[0].get('status', '?') if failed else '?'
                rows.append(label.split(' | ') + [status] + ['—'] * 7)
                continue
            best = min(cases, key=lambda r: r['total_s'])
            totals = ', '.join(f'{r["total_s"]:.2f}' for r in cases)
            rows.append(label.split(' | ') + [
                f'{best["total_s"]:.2f} ({totals})',
                f'{best["features_s"]:.2f}', f'{best["head_s"]:.2f}',
                f'{100 * best["head_s"] / best["total_s"]:.0f}%',
                f'{best["params_m"]:.1f} ({best["head_params_m"]:.1f})',
                f'{best["cpu_s"]:.2f}', f'{best["peak_rss_mb"]}',
                f'{best["cpu_per_wall"]:.2f}'
            ])
    return markdown_table([
        'model', 'input', 'forward s (each round)', 'backbone+neck s',
        'head s', 'head share', 'params M (head)', 'CPU s', 'peak RSS MB',
        'CPU/wall'
    ], rows, align='llrrrrrrrr')


if __name__ == '__main__':
    main()
