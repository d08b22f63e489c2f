"""Benchmark the fused ops against their PyTorch baselines.

Laplacian kernel (forward + backward) for each impl and shape:

- ``cpp`` / ``cuda``: ``laplace_kernel`` with the compiled kernels,
- ``pytorch``: the pure-PyTorch reference,
- ``cdist``: ``torch.exp(-torch.cdist(x, y, p=1))``, the obvious baseline.

Newton–Schulz inverse (20 steps, forward + backward): the fused kernel
(``cpp`` / ``cuda``) against the batched-matmul reference (``pytorch``),
timed alternately in one process.

Reported per case: forward and backward time (median of ``--repeat`` runs;
for Newton–Schulz also the best run, the least disturbed by other load),
peak memory and throughput (B·N·M·d elements per pass). On CPU each case runs
in a fresh subprocess and its peak memory is the rise of the peak RSS over
the RSS after its inputs were made; on CUDA it is the rise of
``torch.cuda.max_memory_allocated``. On CUDA the forward kernel's share of
the fp32 (non-tensor-core) peak is printed too, counting 3 flops (sub, abs,
add) per (i, j, c).

Examples::

    python -m benchmarks.ops --threads 2 --markdown
    python -m benchmarks.ops --device cuda --markdown
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
from typing import Callable, Dict, List, Optional, Tuple

import torch

# The harness lives next to this script; the repository root comes next so
# that a source checkout runs without installing.
from benchmarks.harness import (current_rss_mb, peak_rss_mb,
                               run_in_subprocess, time_passes, worker_main)
from benchmarks.tables import markdown_table

LAPLACE_SHAPES = [(4, 3136, 49, 32), (4, 66800, 49, 32), (4, 66800, 128, 32)]
NS_SIZES = [49, 128, 256]
NS_BATCH = 8
NS_ITERS = 20


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--device', default='cpu', choices=['cpu', 'cuda'])
    parser.add_argument(
        '--impls',
        default=None,
        help='comma-separated impls for the Laplacian kernel (default: '
        'cdist,pytorch and the compiled impl of the device)')
    parser.add_argument(
        '--shapes',
        default=None,
        help='Laplacian kernel shapes as B,N,M,d;B,N,M,d;... (default: '
        + ';'.join(','.join(map(str, s)) for s in LAPLACE_SHAPES) + ')')
    parser.add_argument(
        '--ns-sizes',
        default=','.join(map(str, NS_SIZES)),
        help='matrix sizes m for Newton-Schulz ("" to skip)')
    parser.add_argument('--ns-batch', type=int, default=NS_BATCH)
    parser.add_argument(
        '--repeat', type=int, default=5,
        help='timed runs per Laplacian-kernel case (median reported)')
    parser.add_argument(
        '--ns-repeat', type=int, default=20,
        help='timed runs per Newton-Schulz case (they take milliseconds)')
    parser.add_argument(
        '--threads', type=int, default=None, help='torch CPU threads')
    parser.add_argument(
        '--dtype', default='float32', choices=['float32', 'float16',
                                               'bfloat16', 'float64'])
    parser.add_argument(
        '--peak-tflops',
        type=float,
        default=None,
        help='fp32 non-tensor-core peak of the GPU in TFLOP/s (default: from '
        'the device properties; H200 is about 67)')
    parser.add_argument(
        '--markdown', action='store_true', help='print markdown tables')
    parser.add_argument(
        '--in-process',
        action='store_true',
        help='run CPU cases in this process (peak memory is then not '
        'measured per case)')
    parser.add_argument('--worker', default=None, help=argparse.SUPPRESS)
    return parser.parse_args()


# ------------------------------------------------------------ measurement --


def _time_fwd_bwd(make_out: Callable[[], torch.Tensor],
                  inputs: List[torch.Tensor],
                  repeat: int,
                  device: str,
                  warmup: bool = True) -> Tuple[float, float]:
    """Median forward and backward seconds over ``repeat`` runs (after one
    untimed warm-up run unless ``warmup`` is False)."""
    grads: Dict[str, torch.Tensor] = {}

    def forward() -> torch.Tensor:
        for t in inputs:
            t.grad = None
        return make_out()

    def backward(out: torch.Tensor) -> None:
        if 'ones' not in grads:  # made once, on the first (warm-up) pass
            grads['ones'] = torch.ones_like(out)
        out.backward(grads['ones'])

    sync_device = device if device == 'cuda' else None
    if warmup:
        time_passes([forward, backward], 1, sync_device)
    times = time_passes([forward, backward], repeat, sync_device)
    return times.median(0), times.median(1)


def _laplace_fn(impl: str) -> Callable:
    if impl == 'cdist':
        return lambda x, y: torch.exp(-torch.cdist(x, y, p=1))
    from mmlaplacian.ops import laplace_kernel
    return lambda x, y: laplace_kernel(x, y, impl=impl)


def run_case(case: dict) -> dict:
    """Run one benchmark case in this process and return its figures."""
    device, dtype = case['device'], getattr(torch, case['dtype'])
    if case.get('threads'):
        torch.set_num_threads(case['threads'])
    if case['op'] == 'newton_schulz':
        return run_newton_schulz_case(case)
    gen = torch.Generator().manual_seed(0)
    batch, rows, cols, dim = case['shape']
    scale = 1.5 / dim
    x = (torch.randn(batch, rows, dim, generator=gen) * scale).to(
        device, dtype).requires_grad_()
    y = (torch.randn(batch, cols, dim, generator=gen) * scale).to(
        device, dtype).requires_grad_()
    fn = _laplace_fn(case['impl'])
    inputs = [x, y]
    make_out = lambda: fn(x, y)  # noqa: E731

    if device == 'cuda':
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = current_rss_mb() * 2**20
    fwd, bwd = _time_fwd_bwd(make_out, inputs, case['repeat'], device)
    if device == 'cuda':
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = (peak_rss_mb() * 2**20 -
                base if case.get('subprocess') else None)
    return dict(case, fwd=fwd, bwd=bwd, peak=peak)


def run_newton_schulz_case(case: dict) -> dict:
    """Time every impl of ``case['impls']`` on the same matrices, alternating
    between them run by run in a shuffled order, so that they share the
    machine's state and periodic interference from other load does not
    always hit the same impl."""
    from mmlaplacian.ops import newton_schulz_inverse
    device, dtype = case['device'], getattr(torch, case['dtype'])
    gen = torch.Generator().manual_seed(0)
    batch, m = case['shape']
    q = torch.randn(batch, m, m, generator=gen)
    a = (q @ q.mT / m + torch.eye(m)).to(device, dtype).requires_grad_()
    times: Dict[str, Tuple[list, list]] = {i: ([], []) for i in case['impls']}
    order = list(case['impls'])
    shuffler = random.Random(0)
    for step in range(case['repeat'] + 1):
        shuffler.shuffle(order)
        for impl in order:
            fwd, bwd = _time_fwd_bwd(
                lambda: newton_schulz_inverse(a, NS_ITERS, impl=impl), [a],
                1, device, warmup=False)
            if step > 0:  # the first round warms up every impl
                times[impl][0].append(fwd)
                times[impl][1].append(bwd)
    return dict(
        case,
        results=[
            dict(
                impl=impl,
                fwd=statistics.median(f),
                fwd_best=min(f),
                bwd=statistics.median(b)) for impl, (f, b) in times.items()
        ])


def run_isolated(case: dict) -> dict:
    """Run a case in a fresh interpreter so its peak RSS is its own."""
    return run_in_subprocess('benchmarks.ops', dict(case, subprocess=True))


# ---------------------------------------------------------------- reports --


def fp32_peak_tflops(args: argparse.Namespace) -> Optional[float]:
    """fp32 FMA peak: SMs x 128 lanes x 2 flops x clock, or --peak-tflops."""
    if args.peak_tflops:
        return args.peak_tflops
    props = torch.cuda.get_device_properties(0)
    clock_khz = getattr(props, 'clock_rate', None)
    if not clock_khz:
        return None
    return props.multi_processor_count * 128 * 2 * clock_khz * 1e3 / 1e12


def _fmt_ms(seconds: Optional[float]) -> str:
    if seconds is None:
        return '-'
    return f'{seconds * 1e3:.2f}' if seconds < 0.01 else f'{seconds * 1e3:.1f}'


def _fmt_mb(num_bytes: Optional[int]) -> str:
    return '-' if num_bytes is None else f'{num_bytes / 2**20:.0f}'


def print_table(title: str, header: List[str], rows: List[List[str]],
                markdown: bool) -> None:
    print()
    if markdown:
        print(f'#### {title}\n')
        print(markdown_table(header, rows))
    else:
        print(title)
        widths = [
            max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
            for i, h in enumerate(header)
        ]
        print('  '.join(h.rjust(w) for h, w in zip(header, widths)))
        for row in rows:
            print('  '.join(c.rjust(w) for c, w in zip(row, widths)))
    sys.stdout.flush()


def _ok(result: dict) -> bool:
    return result.get('status', 'ok') == 'ok'


def _failure(result: dict) -> str:
    return f"{result['status']}: {result.get('message', '')}"


def laplace_rows(results: List[dict], peak_tflops: Optional[float],
                 device: str) -> Tuple[List[str], List[List[str]]]:
    header = ['impl', 'fwd ms', 'bwd ms', 'fwd+bwd ms', 'vs cdist',
              'peak MB', 'fwd Gelem/s', 'bwd Gelem/s']
    if device == 'cuda':
        header.append('fwd % fp32 peak')
    base = next((r for r in results if r['impl'] == 'cdist' and _ok(r)),
                None)
    rows = []
    for r in results:
        if not _ok(r):
            rows.append([r['impl'], _failure(r)] + ['-'] * (len(header) - 2))
            continue
        batch, n, m, d = r['shape']
        elems = batch * n * m * d
        total = r['fwd'] + r['bwd']
        speedup = (f"{(base['fwd'] + base['bwd']) / total:.1f}x"
                   if base else '-')
        row = [
            r['impl'], _fmt_ms(r['fwd']), _fmt_ms(r['bwd']), _fmt_ms(total),
            speedup, _fmt_mb(r['peak']), f"{elems / r['fwd'] / 1e9:.2f}",
            f"{elems / r['bwd'] / 1e9:.2f}"
        ]
        if device == 'cuda':
            row.append(f"{3 * elems / r['fwd'] / 1e12 / peak_tflops * 100:.1f}"
                       if peak_tflops else '-')
        rows.append(row)
    return header, rows


def ns_rows(results: List[dict]) -> Tuple[List[str], List[List[str]]]:
    # The backward (-Xᵀ G Xᵀ, two bmm) is the same code for every impl.
    # Runs of a few ms are easily hit by preemption on a shared machine: the
    # best run is the steadier basis for the comparison.
    header = ['impl', 'fwd ms', 'fwd ms (best)', 'vs pytorch (best fwd)',
              'bwd ms', 'fwd+bwd ms']
    base = next((r for r in results if r['impl'] == 'pytorch' and _ok(r)),
                None)
    rows = []
    for r in results:
        if not _ok(r):
            rows.append([r['impl'], _failure(r)] + ['-'] * 4)
            continue
        speedup = f"{base['fwd_best'] / r['fwd_best']:.2f}x" if base else '-'
        rows.append([
            r['impl'], _fmt_ms(r['fwd']), _fmt_ms(r['fwd_best']), speedup,
            _fmt_ms(r['bwd']), _fmt_ms(r['fwd'] + r['bwd'])
        ])
    return header, rows


def main() -> None:
    args = parse_args()
    if args.worker:
        worker_main(run_case, args.worker)
        return
    if args.device == 'cuda' and not torch.cuda.is_available():
        sys.exit('benchmark_ops: --device cuda needs a CUDA device')
    if args.threads:
        torch.set_num_threads(args.threads)
    compiled = 'cpp' if args.device == 'cpu' else 'cuda'
    impls = (args.impls.split(',') if args.impls else
             ['cdist', 'pytorch', compiled])
    shapes = ([tuple(int(v) for v in s.split(','))
               for s in args.shapes.split(';')]
              if args.shapes else LAPLACE_SHAPES)
    ns_sizes = [int(v) for v in args.ns_sizes.split(',') if v.strip()]
    isolate = args.device == 'cpu' and not args.in_process
    runner = run_isolated if isolate else run_case

    from mmlaplacian.ops import ext_info
    print(f'torch {torch.__version__}, device {args.device}, dtype '
          f'{args.dtype}, threads {torch.get_num_threads()}, repeat '
          f'{args.repeat}, ext {ext_info()}')
    if args.device == 'cuda':
        print(f'GPU: {torch.cuda.get_device_name(0)}')
    peak_tflops = fp32_peak_tflops(args) if args.device == 'cuda' else None
    if args.device == 'cuda':
        print(f'fp32 peak used for "% fp32 peak": {peak_tflops} TFLOP/s')

    common = dict(device=args.device, dtype=args.dtype, repeat=args.repeat,
                  threads=torch.get_num_threads())
    for shape in shapes:
        results = [
            runner(dict(common, op='laplace', impl=impl, shape=list(shape)))
            for impl in impls
        ]
        header, rows = laplace_rows(results, peak_tflops, args.device)
        print_table(f'laplace_kernel, (B, N, M, d) = {shape}', header, rows,
                    args.markdown)
    for m in ns_sizes:
        case = runner(
            dict(common, op='newton_schulz', impls=['pytorch', compiled],
                 shape=[args.ns_batch, m], repeat=args.ns_repeat))
        results = case.get('results') or [
            dict(impl=impl, status=case['status'],
                 message=case.get('message', ''))
            for impl in case['impls']
        ]
        header, rows = ns_rows(results)
        print_table(
            f'newton_schulz_inverse, B = {args.ns_batch}, m = {m}, '
            f'{NS_ITERS} steps', header, rows, args.markdown)


if __name__ == '__main__':
    main()
