"""Query–key distance distributions per stage of a vision backbone.

Runs a backbone over a folder of images and, through forward hooks on the
attention projections, samples random (query, key) token pairs of the same
image, window and head. For each pair it records the ℓ1 distance (what the
Laplacian kernel ``exp(-||q - k||_1 / λ)`` sees) and the squared ℓ2 distance
(what a Gaussian kernel ``exp(-||q - k||² / 2σ²)`` sees), per stage. It
prints tail statistics per stage (excess kurtosis, 99th/50th percentile
ratio; both scale-free, so models and stages compare directly) and plots
histograms of distance / median.

Hooked projections (found automatically):

* LaplacianFormer: ``attn.q`` (and ``attn.k`` when keys are not shared);
* modules with a fused ``qkv`` linear and ``num_heads`` (Swin's
  ``attn.w_msa.qkv``, our softmax attention);
* modules with ``q`` and ``kv`` linears (timm-style PVTv2);
* ``nn.MultiheadAttention`` (mmdet's PVTv2 ``attn.attn``: q from the
  query, k from the spatially reduced key, through ``in_proj_weight``).

Without ``--checkpoint`` the weights are a random initialisation; the output
says which.

Examples:
    python -m benchmarks.qk_distance --model lf_tiny \\
        --images ../shared/data/coco_mini/val2017 --out-dir work_dirs/qk
    python -m benchmarks.qk_distance \\
        --config configs/quickstart/mask_rcnn_lf_tiny_synthetic.py \\
        --cfg-options model.backbone.attn_cfg.kernel=gaussian \\
        --checkpoint work_dirs/kernel_ablation/gaussian_seed0/epoch_2.pth \\
        --images data/synthetic_coco/val --short-side 256
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import os.path as osp
import re
from collections import defaultdict
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.config import DictAction

from benchmarks.models import MODEL_ZOO, build_backbone

IMAGE_EXTS = ('.jpg', '.jpeg', '.png', '.bmp')
MEAN = np.array([123.675, 116.28, 103.53], dtype=np.float32)
STD = np.array([58.395, 57.12, 57.375], dtype=np.float32)
STAGE_RE = re.compile(r'(?:^|\.)(?:stages|layers)\.(\d+)\.')


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Query-key distance statistics per backbone stage')
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument('--model', choices=list(MODEL_ZOO),
                        help='a built-in backbone')
    source.add_argument('--config', help='detector/classifier config file')
    parser.add_argument('--checkpoint', help='optional weights')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='overrides for --config, e.g. '
        'model.backbone.attn_cfg.kernel=gaussian')
    parser.add_argument('--images', required=True, help='folder of images')
    parser.add_argument('--max-images', type=int, default=16)
    parser.add_argument(
        '--short-side', type=int, default=512,
        help='resize so the shorter side is this (long side <= 1.67x)')
    parser.add_argument(
        '--size-divisor', type=int, default=224,
        help='crop images to a multiple of this (224 = 32 x Swin window 7: '
        'no padded tokens in any model)')
    parser.add_argument(
        '--pairs-per-call', type=int, default=4096,
        help='pairs sampled per attention call')
    parser.add_argument(
        '--max-pairs', type=int, default=200000,
        help='pairs kept per stage (random subset)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--threads', type=int, default=None)
    parser.add_argument('--out-dir', default='work_dirs/qk_distance')
    return parser.parse_args(argv)


# ------------------------------------------------------------------ images
def list_images(folder: str, limit: int) -> List[str]:
    """Sorted image paths in ``folder`` (at most ``limit``)."""
    paths = sorted(
        p for p in glob.glob(osp.join(folder, '*'))
        if p.lower().endswith(IMAGE_EXTS))
    if not paths:
        raise FileNotFoundError(f'no images ({", ".join(IMAGE_EXTS)}) in '
                                f'{folder}')
    return paths[:limit]


def load_image(path: str, short_side: int, divisor: int) -> torch.Tensor:
    """``(1, 3, H, W)`` normalised RGB, resized, centre-cropped to a multiple
    of ``divisor``.

    Cropping instead of padding keeps padded tokens out of the statistics
    (Swin pads its feature maps to whole windows with zeros, which would add
    a spike of identical, bias-only queries and keys).
    """
    import mmcv
    img = mmcv.imread(path, channel_order='rgb')
    long_side = int(short_side * 1333 / 800)
    img = mmcv.imrescale(img, (long_side, short_side))
    height = max(divisor, img.shape[0] // divisor * divisor)
    width = max(divisor, img.shape[1] // divisor * divisor)
    top = max(0, (img.shape[0] - height) // 2)
    left = max(0, (img.shape[1] - width) // 2)
    img = img[top:top + height, left:left + width]
    img = (img.astype(np.float32) - MEAN) / STD
    tensor = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)
    pad_h, pad_w = height - tensor.shape[1], width - tensor.shape[2]
    return F.pad(tensor[None], (0, pad_w, 0, pad_h))  # tiny images only


# --------------------------------------------------------------- sampling
class PairSampler:
    """Accumulates sampled (q, k) distances per stage.

    Args:
        pairs_per_call (int): Pairs drawn from every attention call.
        generator (torch.Generator): Source of the random pairs.
    """

    def __init__(self, pairs_per_call: int,
                 generator: torch.Generator) -> None:
        self.pairs_per_call = pairs_per_call
        self.generator = generator
        self.l1: Dict[int, List[torch.Tensor]] = defaultdict(list)
        self.sq_l2: Dict[int, List[torch.Tensor]] = defaultdict(list)

    def add(self, stage: int, q: torch.Tensor, k: torch.Tensor,
            num_heads: int) -> None:
        """Sample pairs from ``q (B, N, C)`` and ``k (B, M, C)``.

        The pairs share the batch element (image or window) and the head.
        """
        shared = q is k
        batch, num_q, channels = q.shape
        num_k = k.shape[1]
        head_dims = channels // num_heads
        q = q.detach().float().reshape(batch, num_q, num_heads, head_dims)
        k = k.detach().float().reshape(batch, num_k, num_heads, head_dims)
        count = self.pairs_per_call
        b = torch.randint(batch, (count, ), generator=self.generator)
        h = torch.randint(num_heads, (count, ), generator=self.generator)
        i = torch.randint(num_q, (count, ), generator=self.generator)
        if shared and num_k > 1:  # shared keys: no trivial i == j pairs
            j = torch.randint(num_k - 1, (count, ), generator=self.generator)
            j = j + (j >= i).long()
        else:
            j = torch.randint(num_k, (count, ), generator=self.generator)
        diff = q[b, i, h] - k[b, j, h]
        self.l1[stage].append(diff.abs().sum(-1))
        self.sq_l2[stage].append(diff.pow(2).sum(-1))

    def collect(self, max_pairs: int) -> Dict[int, Dict[str, np.ndarray]]:
        """``stage -> {'l1': array, 'sq_l2': array}``, at most max_pairs."""
        out = {}
        for stage in sorted(self.l1):
            l1 = torch.cat(self.l1[stage])
            sq = torch.cat(self.sq_l2[stage])
            if l1.numel() > max_pairs:
                keep = torch.randperm(
                    l1.numel(), generator=self.generator)[:max_pairs]
                l1, sq = l1[keep], sq[keep]
            out[stage] = dict(l1=l1.numpy(), sq_l2=sq.numpy())
        return out


def _split_qkv(out: torch.Tensor) -> tuple:
    channels = out.shape[-1] // 3
    return out[..., :channels], out[..., channels:2 * channels]


def attach_hooks(model: nn.Module, sampler: PairSampler) -> List[str]:
    """Register the hooks; returns the names of the hooked modules."""
    hooked: List[str] = []
    for name, module in model.named_modules():
        match = STAGE_RE.search(name + '.')
        if match is None:
            continue
        stage = int(match.group(1))
        heads = getattr(module, 'num_heads', None)
        children = dict(module.named_children())
        if isinstance(module, nn.MultiheadAttention):
            module.register_forward_pre_hook(
                _mha_hook(sampler, stage), with_kwargs=True)
        elif heads and isinstance(children.get('qkv'), nn.Linear):
            module.qkv.register_forward_hook(
                lambda m, i, o, s=stage, n=heads: sampler.add(
                    s, *_split_qkv(o.flatten(0, -3)), n))
        elif heads and isinstance(children.get('q'), nn.Linear):
            _hook_separate(module, sampler, stage, heads)
        else:
            continue
        hooked.append(name)
    if not hooked:
        raise RuntimeError('no attention projections found to hook (looked '
                           'for q/k, qkv, q/kv linears and '
                           'nn.MultiheadAttention under stages.N / layers.N)')
    return hooked


def _hook_separate(module: nn.Module, sampler: PairSampler, stage: int,
                   heads: int) -> None:
    """Hook ``q`` plus ``k`` or ``kv`` (or keys shared with queries)."""
    key_proj = getattr(module, 'k', None)
    kv_proj = getattr(module, 'kv', None)
    cache: Dict[str, torch.Tensor] = {}

    def on_q(_m, _i, out):
        if key_proj is None and kv_proj is None:  # shared keys: k = q
            sampler.add(stage, out, out, heads)
        else:
            cache['q'] = out

    def on_k(_m, _i, out):
        if kv_proj is not None:
            out = out[..., :out.shape[-1] // 2]
        sampler.add(stage, cache.pop('q'), out, heads)

    module.q.register_forward_hook(on_q)
    if key_proj is not None:
        key_proj.register_forward_hook(on_k)
    elif kv_proj is not None:
        kv_proj.register_forward_hook(on_k)


def _mha_hook(sampler: PairSampler, stage: int) -> Callable:
    """Pre-hook for ``nn.MultiheadAttention``: project query and key."""

    def hook(module: nn.MultiheadAttention, args: tuple, kwargs: dict):
        query = kwargs.get('query', args[0] if args else None)
        key = kwargs.get('key', args[1] if len(args) > 1 else query)
        channels = module.embed_dim
        weight, bias = module.in_proj_weight, module.in_proj_bias
        bias_q = None if bias is None else bias[:channels]
        bias_k = None if bias is None else bias[channels:2 * channels]
        q = F.linear(query, weight[:channels], bias_q)
        k = F.linear(key, weight[channels:2 * channels], bias_k)
        if not module.batch_first:  # (L, B, C) -> (B, L, C)
            q, k = q.transpose(0, 1), k.transpose(0, 1)
        sampler.add(stage, q, k, module.num_heads)

    return hook


# -------------------------------------------------------------- statistics
def tail_stats(values: np.ndarray) -> Dict[str, float]:
    """Mean, median, 99th percentile, p99/p50 and excess kurtosis."""
    values = values.astype(np.float64)
    p50, p99 = np.percentile(values, [50, 99])
    centred = values - values.mean()
    var = np.mean(centred**2)
    kurt = np.mean(centred**4) / var**2 - 3 if var > 0 else float('nan')
    return dict(
        n=int(values.size), mean=float(values.mean()), p50=float(p50),
        p99=float(p99), p99_p50=float(p99 / p50) if p50 > 0 else math.inf,
        excess_kurtosis=float(kurt))


def format_table(stats: Dict[int, Dict[str, dict]]) -> str:
    """Markdown table: one row per stage and distance."""
    lines = ['| stage | distance | pairs | median | p99 | p99/p50 | '
             'excess kurtosis |', '|---|---|---|---|---|---|---|']
    for stage, per_metric in stats.items():
        for metric, label in (('l1', 'ℓ1'), ('sq_l2', 'ℓ2²')):
            s = per_metric[metric]
            lines.append(
                f'| {stage + 1} | {label} | {s["n"]} | {s["p50"]:.4g} | '
                f'{s["p99"]:.4g} | {s["p99_p50"]:.3f} | '
                f'{s["excess_kurtosis"]:.3f} |')
    return '\n'.join(lines) + '\n'


def plot(samples: Dict[int, Dict[str, np.ndarray]],
         stats: Dict[int, Dict[str, dict]], title: str, path: str) -> None:
    """Histograms of distance / median: rows ℓ1, ℓ2²; a column per stage."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    stages = sorted(samples)
    fig, axes = plt.subplots(
        2, len(stages), figsize=(3.6 * len(stages), 5.6), squeeze=False)
    for col, stage in enumerate(stages):
        for row, (metric, label) in enumerate((('l1', 'ℓ1'),
                                               ('sq_l2', 'ℓ2²'))):
            ax = axes[row][col]
            s = stats[stage][metric]
            ratio = samples[stage][metric] / max(s['p50'], 1e-12)
            ax.hist(ratio, bins=80, density=True, log=True, color=f'C{row}')
            ax.axvline(s['p99_p50'], color='k', ls='--', lw=1)
            ax.set_title(f'stage {stage + 1} {label}: kurt '
                         f'{s["excess_kurtosis"]:.2f}, p99/p50 '
                         f'{s["p99_p50"]:.2f}', fontsize=8)
            ax.set_xlabel(f'{label} distance / median', fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Optional[Sequence[str]] = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    name = args.model or args.config
    weights = (f'checkpoint {args.checkpoint}' if args.checkpoint else
               f'random initialisation, seed {args.seed}, no checkpoint')
    model = build_backbone(name, args.checkpoint, args.cfg_options)
    sampler = PairSampler(args.pairs_per_call,
                          torch.Generator().manual_seed(args.seed))
    hooked = attach_hooks(model, sampler)
    paths = list_images(args.images, args.max_images)
    print(f'{name}: weights = {weights}; {len(hooked)} attention modules '
          f'hooked; {len(paths)} images from {args.images}', flush=True)
    with torch.no_grad():
        for index, path in enumerate(paths, 1):
            image = load_image(path, args.short_side, args.size_divisor)
            model(image)
            print(f'[{index}/{len(paths)}] {osp.basename(path)} '
                  f'{tuple(image.shape[2:])}', flush=True)

    samples = sampler.collect(args.max_pairs)
    stats = {
        stage: {m: tail_stats(v) for m, v in per.items()}
        for stage, per in samples.items()
    }
    table = format_table(stats)
    print(f'\nQuery-key distances, {name} ({weights}):\n\n{table}')
    os.makedirs(args.out_dir, exist_ok=True)
    tag = osp.splitext(osp.basename(name))[0]
    png = osp.join(args.out_dir, f'qk_distance_{tag}.png')
    plot(samples, stats, f'{tag}: query-key distances ({weights})', png)
    report = dict(model=name, weights=weights, images=len(paths),
                  hooked=hooked, stats={str(k): v for k, v in stats.items()})
    with open(osp.join(args.out_dir, f'qk_distance_{tag}.json'), 'w') as f:
        json.dump(report, f, indent=1)
    with open(osp.join(args.out_dir, f'qk_distance_{tag}.md'), 'w') as f:
        f.write(f'{name} ({weights}), {len(paths)} images\n\n{table}')
    print(f'wrote {png} (+ .json, .md)')
    return report


if __name__ == '__main__':
    main()
