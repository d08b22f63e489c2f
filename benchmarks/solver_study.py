"""Compare inverse solvers on Laplacian landmark matrices.

The attention inverts ``A = exp(-||p_i - p_j||_1 / λ) + εI`` (``m × m``, SPD)
for every head. This study builds batches of such matrices from random
points, with λ chosen by bisection so that the batch-median condition number
hits each target, and runs

* Newton–Schulz ``X ← 2X − XAX`` with three initialisations:
  ``identity`` ``X0 = I / ||A||_∞`` (the package's choice for SPD ``A``),
  ``transpose`` ``X0 = Aᵀ / (||A||_1 ||A||_∞)`` (its choice otherwise), both
  from the package's ``newton_schulz_initial_guess``, and ``soft``
  ``X0 = 1.8 A / (max_i Σ_j A_ij)²`` (SOFT-style, written here only for
  comparison);
* batched conjugate gradient on ``A X = I`` (``m`` right-hand sides);
* ``torch.linalg.solve(A, I)`` (LU, the direct reference);
* the package's ``newton_schulz_inverse`` op.

It records the relative residual ``||I − AX||_F / ||I||_F`` (batch median)
after every iteration and the CPU time of each solver, then writes a PNG
plot, a markdown table and the raw numbers as JSON.

Cost per iteration: one Newton–Schulz step is two ``m × m × m`` matmuls; one
CG step is one matmul plus vector work on the ``m`` columns.

Example:
    python -m benchmarks.solver_study --out-dir work_dirs/solver
    python -m benchmarks.solver_study --conds 10 100 --iters 10 \\
        --batch 4 --size 16 --out-dir /tmp/solver
"""
from __future__ import annotations

import argparse
import json
import math
import os
import os.path as osp
import time
from typing import Callable, Dict, List, Optional, Sequence

import torch

# The harness lives next to this script; the repository root comes next so
# that a source checkout runs without installing.
from benchmarks.harness import time_passes
from benchmarks.tables import markdown_table

from mmlaplacian.ops import newton_schulz_inverse
from mmlaplacian.ops.reference import newton_schulz_initial_guess  # noqa

NS_INITS = ('identity', 'transpose', 'soft')
METHODS = tuple(f'ns_{init}' for init in NS_INITS) + ('cg', )
LABELS = {
    'ns_identity': 'NS, X0 = I/‖A‖∞',
    'ns_transpose': 'NS, X0 = Aᵀ/(‖A‖₁‖A‖∞)',
    'ns_soft': 'NS, X0 = 1.8A/rowsum² (SOFT-style)',
    'cg': 'CG on AX = I',
}


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Newton-Schulz vs CG vs LU on Laplacian landmark '
        'matrices')
    parser.add_argument(
        '--conds', type=float, nargs='+', default=[1e1, 1e2, 1e3, 1e4],
        help='target condition numbers (batch median)')
    parser.add_argument(
        '--size', type=int, default=49, help='landmarks m (matrix size)')
    parser.add_argument(
        '--dim', type=int, default=32, help='dimension of the points')
    parser.add_argument(
        '--batch', type=int, default=32, help='matrices per condition')
    parser.add_argument(
        '--eps', type=float, default=1e-3,
        help='diagonal shift εI (bounds the condition number by ~m/ε)')
    parser.add_argument(
        '--iters', type=int, default=60, help='iterations traced per method')
    parser.add_argument(
        '--ns-iters', type=int, default=20,
        help='the fixed iteration count used in the model (table column)')
    parser.add_argument(
        '--tols', type=float, nargs='+', default=[1e-2, 1e-4],
        help='report iterations needed to reach these residuals')
    parser.add_argument(
        '--dtype', choices=['float32', 'float64'], default='float32')
    parser.add_argument(
        '--repeat', type=int, default=20, help='timing repeats (median)')
    parser.add_argument(
        '--threads', type=int, default=1,
        help='torch threads (1: m×m matmuls are too small to share, and '
        'idle-spinning threads distort timings on a loaded machine)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--out-dir', default='work_dirs/solver_study')
    return parser.parse_args(argv)


# ----------------------------------------------------------------- matrices
def laplacian_matrices(points: torch.Tensor, lam: float,
                       eps: float) -> torch.Tensor:
    """``exp(-||p_i - p_j||_1 / λ) + εI`` for a batch of point sets.

    Args:
        points (Tensor): ``(B, m, d)`` points (float64).
        lam (float): Bandwidth λ.
        eps (float): Diagonal shift ε.

    Returns:
        Tensor: ``(B, m, m)`` SPD matrices, float64.
    """
    dist = torch.cdist(points, points, p=1)
    eye = torch.eye(points.shape[1], dtype=points.dtype)
    return torch.exp(-dist / lam) + eps * eye


def median_cond(mats: torch.Tensor) -> float:
    """Batch median of the 2-norm condition numbers."""
    return torch.linalg.cond(mats).median().item()


def lambda_for_cond(points: torch.Tensor, target: float, eps: float,
                    steps: int = 60) -> float:
    """Bisect log λ so that the batch-median condition number is ``target``.

    The condition number grows with λ from ~1 (λ → 0, ``A → (1+ε)I``) to
    ~``m/ε`` (λ → ∞, ``A → 11ᵀ + εI``).
    """
    size = points.shape[1]
    if not 1 < target < (size + eps) / eps:
        raise ValueError(f'target condition {target:g} is out of reach for '
                         f'm={size}, eps={eps:g} (max ~{size / eps:.3g})')
    lo, hi = math.log(1e-3), math.log(1e6)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        cond = median_cond(laplacian_matrices(points, math.exp(mid), eps))
        if cond < target:
            lo = mid
        else:
            hi = mid
    return math.exp(0.5 * (lo + hi))


# ------------------------------------------------------------------ solvers
def ns_init(mats: torch.Tensor, init: str) -> torch.Tensor:
    """Newton–Schulz starting point ``X0`` for each matrix of the batch.

    ``identity`` and ``transpose`` are the package's starts; ``soft`` is
    SOFT's, kept here for the comparison only.
    """
    if init in ('identity', 'transpose'):
        return newton_schulz_initial_guess(mats, init)
    if init == 'soft':
        rowsum = mats.sum(-1).amax(-1).view(-1, 1, 1)
        return 1.8 * mats / rowsum**2
    raise ValueError(f'unknown Newton-Schulz init {init!r}')


def relative_residual(mats: torch.Tensor, inv: torch.Tensor) -> torch.Tensor:
    """``||I − A X||_F / sqrt(m)`` per matrix, computed in float64."""
    size = mats.shape[-1]
    eye = torch.eye(size, dtype=torch.float64)
    res = eye - mats.double() @ inv.double()
    return torch.linalg.matrix_norm(res) / math.sqrt(size)


def newton_schulz(mats: torch.Tensor, init: str, iters: int,
                  trace: bool = True) -> List[torch.Tensor]:
    """Run ``iters`` Newton–Schulz steps; residuals after each (if traced).

    Returns:
        list[Tensor]: ``iters + 1`` residual vectors (step 0 is ``X0``), or
        ``[X]`` when ``trace`` is False.
    """
    inv = ns_init(mats, init)
    history = [relative_residual(mats, inv)] if trace else []
    for _ in range(iters):
        inv = 2 * inv - inv @ (mats @ inv)
        if trace:
            history.append(relative_residual(mats, inv))
    return history if trace else [inv]


def conjugate_gradient(mats: torch.Tensor, iters: int,
                       trace: bool = True) -> List[torch.Tensor]:
    """Batched CG on ``A X = I``: every column is its own CG run.

    Returns:
        list[Tensor]: ``iters + 1`` residual vectors (step 0 is ``X = 0``),
        or ``[X]`` when ``trace`` is False.
    """
    size = mats.shape[-1]
    eye = torch.eye(size, dtype=mats.dtype).expand_as(mats)
    inv = torch.zeros_like(mats)
    res = eye.clone()
    direction = res.clone()
    rr = (res * res).sum(-2, keepdim=True)  # (B, 1, m): one per column
    tiny = torch.finfo(mats.dtype).tiny
    history = [relative_residual(mats, inv)] if trace else []
    for _ in range(iters):
        a_dir = mats @ direction
        alpha = rr / (direction * a_dir).sum(-2, keepdim=True).clamp_min(tiny)
        inv = inv + alpha * direction
        res = res - alpha * a_dir
        rr_new = (res * res).sum(-2, keepdim=True)
        direction = res + rr_new / rr.clamp_min(tiny) * direction
        rr = rr_new
        if trace:
            history.append(relative_residual(mats, inv))
    return history if trace else [inv]


def first_below(values: Sequence[float], tol: float) -> Optional[int]:
    """Index of the first value ``<= tol`` (None when never reached)."""
    for index, value in enumerate(values):
        if value <= tol:
            return index
    return None


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    """Median process CPU time of ``fn`` over ``repeat`` runs (one warm-up).

    CPU time, not wall time: with one thread it does not count the time
    other processes on a shared machine hold the core.
    """
    time_passes([fn], 1)
    return time_passes([fn], repeat).median_cpu()


# ------------------------------------------------------------------- study
def study_condition(points: torch.Tensor, target: float,
                    args: argparse.Namespace) -> dict:
    """Residual traces and timings for one target condition number."""
    dtype = getattr(torch, args.dtype)
    lam = lambda_for_cond(points, target, args.eps)
    mats64 = laplacian_matrices(points, lam, args.eps)
    mats = mats64.to(dtype)
    result = dict(
        target_cond=target, lam=lam, cond=median_cond(mats64), traces={},
        iters_to_tol={}, residual_at_ns_iters={}, seconds={})

    for method in METHODS:
        if method == 'cg':
            hist = conjugate_gradient(mats, args.iters)
        else:
            hist = newton_schulz(mats, method[3:], args.iters)
        median = [h.median().item() for h in hist]
        worst = [h.max().item() for h in hist]
        result['traces'][method] = dict(median=median, max=worst)
        result['iters_to_tol'][method] = {
            f'{tol:g}': first_below(worst, tol)
            for tol in args.tols
        }
        result['residual_at_ns_iters'][method] = median[min(
            args.ns_iters, args.iters)]

    eye = torch.eye(args.size, dtype=dtype).expand_as(mats)
    ns_iters = args.ns_iters
    timers: Dict[str, Callable[[], object]] = {
        f'ns_identity x{ns_iters}':
        lambda: newton_schulz(mats, 'identity', ns_iters, trace=False),
        f'cg x{ns_iters}':
        lambda: conjugate_gradient(mats, ns_iters, trace=False),
        'linalg.solve': lambda: torch.linalg.solve(mats, eye),
    }
    for impl in ('auto', 'pytorch'):
        timers[f'op[{impl}] x{ns_iters}'] = (
            lambda impl=impl: newton_schulz_inverse(
                mats, num_iters=ns_iters, init='auto', impl=impl))
    for name, fn in timers.items():
        result['seconds'][name] = median_seconds(fn, args.repeat)
    solve_res = relative_residual(mats, torch.linalg.solve(mats, eye))
    result['residual_at_ns_iters']['linalg.solve'] = solve_res.median().item(
    )
    inv = newton_schulz_inverse(
        mats, num_iters=ns_iters, init='auto', impl='auto')
    result['residual_at_ns_iters']['op[auto]'] = relative_residual(
        mats, inv).median().item()
    return result


# ------------------------------------------------------------------ output
def iteration_cell(method: str, iters: Optional[int]) -> str:
    """Table cell for 'iterations to a tolerance'."""
    if method not in METHODS:
        return 'direct' if method == 'linalg.solve' else 'fixed'
    return '—' if iters is None else str(iters)


def markdown_tables(results: List[dict], args: argparse.Namespace) -> str:
    """Two markdown tables: convergence and CPU time."""
    tol_names = [f'{tol:g}' for tol in args.tols]
    lines = [
        f'm = {args.size}, d = {args.dim}, ε = {args.eps:g}, batch = '
        f'{args.batch}, {args.dtype}; residual = median over the batch of '
        '‖I − AX‖_F / √m; iterations to a tolerance = first iteration '
        'where the *worst* matrix of the batch is below it (— = not '
        f'within {args.iters}).', ''
    ]
    header = ['cond (median)', 'λ', 'method'] + [
        f'res. @ {min(args.ns_iters, args.iters)} it.'
    ] + [f'it. to {t}' for t in tol_names]
    rows = []
    for res in results:
        for method in METHODS + ('linalg.solve', 'op[auto]'):
            if method not in res['residual_at_ns_iters']:
                continue
            its = res['iters_to_tol'].get(method, {})
            rows.append([
                f'{res["cond"]:.3g}', f'{res["lam"]:.3g}',
                LABELS.get(method, method),
                f'{res["residual_at_ns_iters"][method]:.2e}'
            ] + [iteration_cell(method, its.get(t)) for t in tol_names])
    names = list(results[0]['seconds'])
    lines += [
        markdown_table(header, rows), '',
        f'CPU time per batch of {args.batch} matrices (ms, median of '
        f'{args.repeat}; {torch.get_num_threads()} thread(s)):', '',
        markdown_table(['cond'] + names, [
            [f'{res["cond"]:.3g}'] +
            [f'{1e3 * res["seconds"][n]:.3f}' for n in names]
            for res in results
        ])
    ]
    return '\n'.join(lines) + '\n'


def plot(results: List[dict], ns_iters: int, path: str) -> None:
    """Residual against iteration, one panel per condition number."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        1, len(results), figsize=(4.2 * len(results), 3.8), squeeze=False,
        sharey=True)
    for ax, res in zip(axes[0], results):
        for method in METHODS:
            trace = res['traces'][method]['median']
            finite = [v if math.isfinite(v) and v < 1e6 else float('nan')
                      for v in trace]
            ax.semilogy(range(len(trace)), finite, label=LABELS[method])
        solve = res['residual_at_ns_iters']['linalg.solve']
        ax.axhline(solve, color='k', ls=':', lw=1, label='linalg.solve')
        ax.axvline(ns_iters, color='grey', lw=0.8,
                   label=f'model default ({ns_iters} it.)')
        ax.set_title(f'cond ≈ {res["cond"]:.3g}')
        ax.set_xlabel('iteration')
        ax.grid(True, which='both', alpha=0.3)
    axes[0][0].set_ylabel('‖I − AX‖_F / √m  (batch median)')
    axes[0][-1].legend(fontsize=7, loc='upper right')
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    os.makedirs(args.out_dir, exist_ok=True)
    gen = torch.Generator().manual_seed(args.seed)
    points = torch.randn(
        args.batch, args.size, args.dim, generator=gen, dtype=torch.float64)

    results = []
    for index, target in enumerate(args.conds, 1):
        start = time.perf_counter()
        results.append(study_condition(points, target, args))
        print(f'[{index}/{len(args.conds)}] cond {results[-1]["cond"]:.3g} '
              f'(λ = {results[-1]["lam"]:.3g}) done in '
              f'{time.perf_counter() - start:.1f} s', flush=True)

    table = markdown_tables(results, args)
    print(table)
    png = osp.join(args.out_dir, 'solver_residuals.png')
    plot(results, args.ns_iters, png)
    with open(osp.join(args.out_dir, 'solver_study.md'), 'w') as f:
        f.write(table)
    with open(osp.join(args.out_dir, 'solver_study.json'), 'w') as f:
        json.dump(dict(args=vars(args), results=results), f, indent=1)
    print(f'wrote {png}, solver_study.md and solver_study.json in '
          f'{args.out_dir}')


if __name__ == '__main__':
    main()
