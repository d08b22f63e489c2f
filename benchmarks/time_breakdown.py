"""Where a backbone's forward time goes, and how each part scales with size.

Forward hooks time every module; each module's own time goes to its
ancestor ``--depth`` names deep (``stages.0.blocks.1.attn`` is five deep),
summed over the blocks of a stage (the block index is dropped:
``stages.0.blocks.attn``).
A block's own time (residual additions, reshapes) is listed under its
stage (``stages.0``); time in the backbone's own forward outside any
submodule (position embeddings, output reshapes) is ``(rest)``. The table
sums parts under 1% of the time into one row; the JSON keeps them all. All
sizes run in one process, their passes alternating, so a disturbance on a
shared machine hits every size alike. Eval mode, ``torch.no_grad``, batch 1,
random weights.

For the first and the last size the table gives each part's time ratio
against the pixel ratio, and ``if rest linear``: the whole model's ratio if
every *other* part grew exactly with the pixels. That column shows which
parts decide whether the model scales linearly: a part whose own growth
alone pushes the whole model over a limit cannot be fixed elsewhere.

Output in ``--out-dir``: ``breakdown.json``, ``breakdown.md`` and
``breakdown.png`` (time per megapixel, stacked by part: parts that scale
linearly keep their height from size to size).

Examples:
    python -m benchmarks.time_breakdown lf_tiny \\
        --sizes 800x1344 1600x2688 --threads 2
    python -m benchmarks.time_breakdown swin_t --depth 4
"""
from __future__ import annotations

import argparse
import json
import os
import os.path as osp
import statistics
import time
from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from benchmarks.models import build_backbone
from benchmarks.backbone import parse_size
from benchmarks.harness import time_passes
from benchmarks.tables import markdown_table

REST = '(rest)'
SMALL = '(parts under 1% each)'


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Per-module forward time of a backbone against size')
    parser.add_argument(
        'model', help='backbone_zoo shortcut (lf_tiny, swin_t, ...) or a '
        'config file')
    parser.add_argument(
        '--sizes', nargs='+', type=parse_size,
        default=[(800, 1344), (1600, 2688)], help='input sizes HxW')
    parser.add_argument('--depth', type=int, default=5,
                        help='time the modules this many names deep')
    parser.add_argument('--repeat', type=int, default=3,
                        help='timed passes per size (median)')
    parser.add_argument('--warmup', type=int, default=1,
                        help='untimed passes per size first')
    parser.add_argument('--threads', type=int, default=os.cpu_count(),
                        help='torch.set_num_threads')
    parser.add_argument('--out-dir', default='work_dirs/time_breakdown')
    args = parser.parse_args(argv)
    if args.depth < 1 or args.repeat < 1 or args.warmup < 0:
        parser.error('--depth and --repeat must be >= 1, --warmup >= 0')
    if len(args.sizes) < 2:
        parser.error('give at least two --sizes to compare')
    return args


def group_name(name: str) -> str:
    """``stages.0.blocks.1.attn`` -> ``stages.0.blocks.attn``: keep the
    first index (the stage), drop later ones (the block within it)."""
    parts, seen_index = [], False
    for part in name.split('.'):
        if part.isdigit():
            if seen_index:
                continue
            seen_index = True
        parts.append(part)
    return '.'.join(parts)


class ModuleTimer:
    """Wall time of a model's modules, grouped ``depth`` names deep.

    Every module is hooked, and each one's *own* time (its call minus the
    calls of its submodules) goes to its ancestor ``depth`` names deep. So
    the parts add up to the whole pass, and time spent in a module that does
    not call its children (e.g. a conv with BN folded in) still lands in the
    right part. The root module's own time is :data:`REST`.

    Args:
        model (nn.Module): The model to instrument.
        depth (int): Name depth of the reported parts.
    """

    def __init__(self, model: nn.Module, depth: int) -> None:
        self.seconds: Dict[str, float] = defaultdict(float)
        self._stack: List[list] = []  # [name, start, seconds in children]
        self._handles = []
        for name, module in model.named_modules():
            part = '.'.join(name.split('.')[:depth]) if name else REST
            self._handles += [
                module.register_forward_pre_hook(self._enter(name)),
                module.register_forward_hook(self._leave(group_name(part)))
            ]

    def _enter(self, name: str):

        def hook(*_) -> None:
            self._stack.append([name, time.perf_counter(), 0.])

        return hook

    def _leave(self, part: str):

        def hook(*_) -> None:
            _, start, in_children = self._stack.pop()
            seconds = time.perf_counter() - start
            self.seconds[part] += seconds - in_children
            if self._stack:
                self._stack[-1][2] += seconds

        return hook

    def reset(self) -> None:
        self.seconds.clear()

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def measure(model: nn.Module, sizes: List[Tuple[int, int]], depth: int,
            repeat: int, warmup: int) -> List[dict]:
    """Median total and per-part seconds of a forward pass at each size.

    The passes of the sizes alternate (``repeat`` rounds), so slow phases of
    a shared machine are spread over all sizes.
    """
    images = [torch.randn(1, 3, h, w) for h, w in sizes]
    timer = ModuleTimer(model, depth)
    totals: List[List[float]] = [[] for _ in sizes]
    parts: List[Dict[str, List[float]]] = [defaultdict(list) for _ in sizes]
    passes = [[lambda image=image: model(image)] for image in images]
    with torch.no_grad():
        for one_pass in passes:
            time_passes(one_pass, warmup)
        for _ in range(repeat):
            for index, one_pass in enumerate(passes):
                timer.reset()
                totals[index] += time_passes(one_pass, 1).wall[0]
                for name, seconds in timer.seconds.items():
                    parts[index][name].append(seconds)
    timer.remove()
    # A path can differ with the size (e.g. token chunks only when large).
    names = sorted(set().union(*parts))
    return [
        dict(size=list(size), total=statistics.median(totals[index]),
             parts={name: statistics.median(parts[index].get(name, [0.]))
                    for name in names})
        for index, size in enumerate(sizes)
    ]


def ratio_if_rest_linear(part_small: float, part_large: float,
                         total_small: float, pixel_ratio: float) -> float:
    """Whole-model time ratio if everything but this part grew exactly with
    the pixels and this part grew as measured."""
    rest = (total_small - part_small) * pixel_ratio
    return (rest + part_large) / total_small


def main_parts(results: List[dict], min_share: float = 0.01) -> List[dict]:
    """``results`` with the parts under ``min_share`` of the total at every
    size summed into one part (:data:`SMALL`)."""
    keep = [
        name for name in results[0]['parts']
        if max(r['parts'][name] / r['total'] for r in results) >= min_share
    ]
    folded = []
    for result in results:
        parts = {name: result['parts'][name] for name in keep}
        parts[SMALL] = sum(v for n, v in result['parts'].items()
                           if n not in keep)
        folded.append(dict(result, parts=parts))
    return folded


def scaling_rows(results: List[dict]) -> Tuple[List[List[str]], float]:
    """Table rows comparing the first and the last size (largest part at
    the last size first), and the pixel ratio between them."""
    small, large = results[0], results[-1]
    pixel_ratio = (large['size'][0] * large['size'][1]) / (
        small['size'][0] * small['size'][1])
    rows = []
    for name in sorted(small['parts'], key=lambda n: -large['parts'][n]):
        part_small, part_large = small['parts'][name], large['parts'][name]
        ratio = part_large / part_small if part_small > 0 else float('nan')
        whole = ratio_if_rest_linear(part_small, part_large, small['total'],
                                     pixel_ratio)
        rows.append([
            name, f'{part_small * 1e3:.1f}', f'{part_large * 1e3:.1f}',
            f'{ratio:.2f}x', f'{part_large / large["total"]:.1%}',
            f'{whole:.2f}x'
        ])
    rows.append([
        'total', f'{small["total"] * 1e3:.1f}', f'{large["total"] * 1e3:.1f}',
        f'{large["total"] / small["total"]:.2f}x', '100%', ''
    ])
    return rows, pixel_ratio


def plot(results: List[dict], model: str, path: str) -> None:
    """Stacked bars of milliseconds per megapixel, one bar per size."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    names = sorted(results[-1]['parts'],
                   key=lambda n: results[-1]['parts'][n])
    colours = plt.get_cmap('tab20').colors
    labels = [f'{h}x{w}' for h, w in (r['size'] for r in results)]
    fig, ax = plt.subplots(figsize=(8, 5))
    bottoms = [0.] * len(results)
    for index, name in enumerate(names):
        heights = [
            r['parts'][name] * 1e3 / (r['size'][0] * r['size'][1] / 1e6)
            for r in results
        ]
        ax.bar(labels, heights, bottom=bottoms, label=name,
               color=colours[index % len(colours)], edgecolor='white',
               linewidth=0.5)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    ax.set_ylabel('forward time per megapixel (ms)')
    ax.set_title(f'{model}: time per pixel by part (same height = linear)')
    handles, names = ax.get_legend_handles_labels()
    # Legend top to bottom as the stack.
    ax.legend(handles[::-1], names[::-1], fontsize='small',
              bbox_to_anchor=(1.02, 1), loc='upper left')
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Optional[Sequence[str]] = None) -> List[dict]:
    """Measure, print the table, write json/markdown/png; return results."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_backbone(args.model)
    results = measure(model, args.sizes, args.depth, args.repeat,
                      args.warmup)
    rows, pixel_ratio = scaling_rows(main_parts(results))
    (h0, w0), (h1, w1) = args.sizes[0], args.sizes[-1]
    header = [
        'part', f'{h0}x{w0} ms', f'{h1}x{w1} ms', 'ratio',
        f'share at {h1}x{w1}', 'if rest linear'
    ]
    table = markdown_table(header, rows)
    title = (f'{args.model}: forward time by part, {args.threads} threads, '
             f'median of {args.repeat}; pixels grow {pixel_ratio:.2f}x')
    print(title)
    print(table)
    os.makedirs(args.out_dir, exist_ok=True)
    with open(osp.join(args.out_dir, 'breakdown.json'), 'w') as f:
        json.dump(dict(model=args.model, threads=args.threads,
                       results=results), f, indent=1)
    with open(osp.join(args.out_dir, 'breakdown.md'), 'w') as f:
        f.write(f'{title}\n\n{table}\n')
    plot(main_parts(results), args.model,
         osp.join(args.out_dir, 'breakdown.png'))
    print(f'written to {args.out_dir}/breakdown.{{json,md,png}}')
    return results


if __name__ == '__main__':
    main()
