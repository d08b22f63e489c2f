"""The Laplacian kernel's row blocks in ExecuTorch: time per budget and
feature sum.

    python -m benchmarks.executorch_blocks --size 800x1344 --stage 1
    python -m benchmarks.executorch_blocks --feature-sums matmul max-matmul

One Laplacian kernel of LaplacianFormer-T, ``exp(-|q - k~|_1)`` of a
stage's queries ``(heads, N, d)`` against its 49 landmarks (the heads of
one image as the operator's batch), is exported alone in the
``'row-blocks'`` form for each ``--feature-sums`` entry and each
``--budgets`` entry (elements of one block's ``(N_b, m, d)`` tensor), and
lowered to XNNPACK as
:func:`~mmlaplacian.deployment.executorch_export.export_executorch` lowers
it in a whole model. The programs run in turns in one process,
``--passes`` times each after a warm-up, on ``--threads`` threads; the
table gives each program's block count, lowering time and median run
time, and its time against the default program's
(:data:`~mmlaplacian.deployment.executorch_export.XNNPACK_BLOCK_ELEMENTS`,
:data:`~mmlaplacian.deployment.executorch_export.XNNPACK_FEATURE_SUM`).

XNNPACK runs a block as a few operators over the whole block (``'matmul'``:
subtract, abs and the feature sum as a product with a constant column;
``'max-matmul'``: maximum and the product): small blocks pay each
operator's fixed cost many times, and a block larger than the last-level
cache pays for memory traffic. Where the best budget lies depends on the
device's cache.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import List, Optional, Sequence

import torch
import torch.nn as nn

from benchmarks.backbone import parse_size
from benchmarks.harness import time_passes
from benchmarks.tables import markdown_table
from mmlaplacian.ops.export_forms import FEATURE_SUMS

# LaplacianAttention's default number of landmarks (a 7×7 grid).
LANDMARKS = 49
STAGES = (1, 2, 3, 4)
DEFAULT_BUDGETS = (2**19, 2**20, 2**21, 2**22, 2**23)


class LaplaceKernel(nn.Module):
    """``mmlaplacian::laplace_kernel(x, y)``: the operator alone."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        from mmlaplacian.ops import laplace_kernel
        return laplace_kernel(x, y)


def stage_inputs(size: Sequence[int], stage: int) -> List[torch.Tensor]:
    """Queries ``(heads, N, d)`` of the stage at input ``size`` and its
    landmarks ``(heads, 49, d)``, random."""
    from mmlaplacian import LaplacianFormer
    arch = LaplacianFormer.arch_zoo['tiny']
    channels = arch['embed_dims'][stage - 1]
    heads = arch['num_heads'][stage - 1]
    stride = 4 * 2**(stage - 1)  # the backbone's strides: 4, 8, 16, 32
    tokens = (size[0] // stride) * (size[1] // stride)
    generator = torch.Generator().manual_seed(0)
    shape = (heads, tokens, channels // heads)
    x = 0.1 * torch.randn(shape, generator=generator)
    y = 0.1 * torch.randn(heads, LANDMARKS, shape[-1], generator=generator)
    return [x, y]


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--size', type=parse_size, default=(800, 1344),
                        help='the backbone input HxW (default 800x1344)')
    parser.add_argument('--stage', type=int, choices=STAGES,
                        default=1)
    parser.add_argument('--budgets', type=int, nargs='+',
                        default=list(DEFAULT_BUDGETS),
                        help='elements of one row block')
    parser.add_argument('--feature-sums', nargs='+', choices=FEATURE_SUMS,
                        help='how the features are added (default: the '
                        "ExecuTorch export's own)")
    parser.add_argument('--passes', type=int, default=11)
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--work-dir', help='where the programs go (default: '
                        'a temporary folder)')
    args = parser.parse_args(argv)
    if min(args.budgets) < 1:
        parser.error(f'--budgets must be positive, got {args.budgets}')
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    from mmlaplacian.deployment.executorch_export import (
        XNNPACK_BLOCK_ELEMENTS, XNNPACK_FEATURE_SUM, export_executorch)
    from mmlaplacian.deployment.executorch_kernels import load_program
    from mmlaplacian.ops.export_forms import block_rows
    torch.set_num_threads(args.threads)
    inputs = stage_inputs(args.size, args.stage)
    with torch.no_grad():
        expected = LaplaceKernel()(*inputs)
    budgets = sorted(set(args.budgets) | {XNNPACK_BLOCK_ELEMENTS})
    feature_sums = args.feature_sums or [XNNPACK_FEATURE_SUM]
    if XNNPACK_FEATURE_SUM not in feature_sums:
        feature_sums.append(XNNPACK_FEATURE_SUM)
    default = (XNNPACK_FEATURE_SUM, XNNPACK_BLOCK_ELEMENTS)
    programs = [(feature_sum, budget) for feature_sum in feature_sums
                for budget in budgets]
    work_dir = args.work_dir or tempfile.mkdtemp(prefix='executorch_blocks_')
    os.makedirs(work_dir, exist_ok=True)
    methods, lowering, blocks = [], [], []
    for feature_sum, budget in programs:
        path = os.path.join(work_dir, f'kernel_{feature_sum}_{budget}.pte')
        start = time.perf_counter()
        export_executorch(LaplaceKernel(), tuple(inputs), path,
                          block_elements=budget, feature_sum=feature_sum)
        lowering.append(time.perf_counter() - start)
        rows = block_rows(*inputs, budget)
        blocks.append(-(-inputs[0].shape[-2] // rows))
        method = load_program(path).load_method('forward')
        error = (method.execute(inputs)[0] - expected).abs().max().item()
        if error > 1e-5:
            print(f'{feature_sum}, budget {budget}: the program differs '
                  f'from eager by {error:.2g}', file=sys.stderr)
            return 1
        methods.append(method)
        print(f'{feature_sum}, budget {budget}: {blocks[-1]} blocks, '
              f'lowered in {lowering[-1]:.0f} s, largest difference from '
              f'eager {error:.1e}', flush=True)
    for method in methods:  # warm-up
        method.execute(inputs)
    times = time_passes([lambda _=None, m=m: m.execute(inputs)
                         for m in methods], args.passes)
    baseline = times.median(programs.index(default))
    x = inputs[0]
    print(f'\nLaplacian kernel of stage {args.stage} at '
          f'{args.size[0]}x{args.size[1]}: x {tuple(x.shape)}, '
          f'{LANDMARKS} landmarks; {args.threads} threads, median of '
          f'{args.passes} interleaved passes\n')
    rows = [[
        feature_sum + (' (default)' if (feature_sum, budget) == default
                       else ''), f'{budget:,}', f'{budget * 4 / 2**20:g} MiB',
        str(count), f'{seconds:.0f}', f'{1e3 * times.median(index):.1f}',
        f'{times.median(index) / baseline:.2f}'
    ] for index, ((feature_sum, budget), count, seconds) in enumerate(
        zip(programs, blocks, lowering))]
    print(markdown_table(['feature sum', 'block elements', 'fp32 block',
                          'blocks', 'lowering s', 'run ms', 'vs default'],
                         rows, 'llrrrrr'))
    return 0


if __name__ == '__main__':
    sys.exit(main())
