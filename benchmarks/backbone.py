"""Latency and peak memory of detection backbones against input size.

Every (device, mode, size, model) case runs in its own Python subprocess, so
one case's allocations, caches and thread pools never affect another's, and a
case that runs out of time or memory is reported as such instead of ending
the run. Each case builds the backbone (random weights), runs ``--warmup``
untimed passes, then ``--repeat`` timed passes (fewer when one pass is longer
than ``--case-budget`` seconds; the count is reported) and keeps the median.
When a single warm-up pass already exceeds the budget, that pass is the
measurement (marked ``cold``: it includes one-off set-up costs).

Modes: ``fwd`` (eval mode, ``torch.no_grad``) and ``fwdbwd`` (train mode,
forward + backward of the mean of every output map).

Time: wall-clock seconds per pass (median); ``cpu_seconds`` in the JSON is
the process CPU time of the same passes (all threads together; less
sensitive to other load on the machine when ``--threads 1``).

Memory, CPU: ``peak RSS`` is the whole-process peak (``ru_maxrss``), and
``ΔRSS`` is that peak minus the resident set measured just before the first
pass (model built, input allocated), i.e. the activation and workspace
memory of the passes. CUDA: ``torch.cuda.max_memory_allocated`` (peak) and
the same minus the allocated memory before the first pass.

Allocator (``--allocators``): glibc's ``malloc`` maps every allocation
above 32 MB afresh and returns it on ``free``, so at detection resolution
each pass page-faults its large tensors in again. ``no-mmap`` runs the case
with ``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_`` raised (heap
memory kept for reuse, as a caching allocator such as jemalloc would);
``huge-pages`` runs it with ``THP_MEM_ALLOC_ENABLE=1`` (torch's large CPU
tensors in transparent huge pages, 512 times fewer faults each); a list
such as ``default,no-mmap`` runs each, one after the other for each case.

Models (backbone settings of the matching mmdet configs):
``lf_tiny``, ``lf_small`` (ours), ``lf_tiny_linear`` (ours with
``stage4_attention='laplacian'``), ``swin_t`` (mask-rcnn_swin-t-p4-w7),
``pvtv2_b1`` (PyramidVisionTransformerV2 b1), ``resnet50`` (mask-rcnn_r50).

Output in ``--out-dir``: ``results.json``, ``benchmark.md`` (tables) and
``time.png`` / ``memory.png`` (log-log against pixel count, with reference
slopes 1 and 2).

The subprocesses, memory readings, idle wait and timing loop are those of
``benchmarks.harness``; on CUDA every pass is synchronised before and
after it is timed.

Examples:
    python -m benchmarks.backbone --modes fwd
    python -m benchmarks.backbone --device cuda \
        --models lf_tiny swin_t --sizes 800x1344 1600x2688
    python -m benchmarks.backbone --models lf_tiny \\
        resnet50 --sizes 64x64 --repeat 1 --warmup 0 --out-dir /tmp/bench
"""
from __future__ import annotations

import argparse
import json
import math
import os
import os.path as osp
import time
from typing import Dict, List, Optional, Sequence, Tuple

# The zoo and the harness live next to this script.
from benchmarks.models import LABELS, MODEL_ZOO, build_backbone
from benchmarks.harness import (current_rss_mb, peak_rss_mb,
                               run_in_subprocess, save_results,
                               threads_were_busy, time_passes, wait_for_idle,
                               worker_main)
from benchmarks.tables import markdown_table

MODES = ('fwd', 'fwdbwd')
# Environment of a case's subprocess per ``--allocators`` entry. glibc
# serves allocations above 32 MB with fresh mmaps, so every pass page-faults
# its large tensors in again (they first appear at detection resolution);
# ``no-mmap`` serves them from the heap and keeps freed memory for reuse;
# ``huge-pages`` keeps glibc's mmaps but has torch's CPU allocator align
# large tensors to 2 MB and ask for transparent huge pages, so a fresh
# tensor faults in 512 times fewer pages (where the kernel's THP mode is
# ``madvise`` or ``always``); ``default`` is glibc's and torch's own. Each
# entry unsets the variables of the others, whatever the calling shell sets.
_KEEP_FREED_MEMORY = dict(MALLOC_MMAP_THRESHOLD_=str(2**34),
                          MALLOC_TRIM_THRESHOLD_=str(2**34))
_HUGE_PAGES = dict(THP_MEM_ALLOC_ENABLE='1')
_UNSET: Dict[str, Optional[str]] = dict.fromkeys(
    [*_KEEP_FREED_MEMORY, *_HUGE_PAGES])  # None: unset
ALLOCATOR_ENV: Dict[str, Dict[str, Optional[str]]] = {
    'default': dict(_UNSET),
    'no-mmap': {**_UNSET, **_KEEP_FREED_MEMORY},
    'huge-pages': {**_UNSET, **_HUGE_PAGES},
}


def parse_size(text: str) -> Tuple[int, int]:
    """``'800x1344'`` -> ``(800, 1344)``; ``'512'`` -> ``(512, 512)``."""
    parts = text.lower().split('x')
    if len(parts) == 1:
        parts = parts * 2
    try:
        height, width = (int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f'size must look like 800x1344 or 512, got {text!r}') from None
    if height < 32 or width < 32:
        raise argparse.ArgumentTypeError(f'size too small: {text!r}')
    return height, width


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Backbone latency and memory against input size')
    parser.add_argument(
        '--models', nargs='+', default=list(MODEL_ZOO),
        choices=list(MODEL_ZOO))
    parser.add_argument(
        '--sizes', nargs='+', type=parse_size,
        default=[(512, 512), (800, 1344), (1600, 2688)],
        help='input sizes HxW, batch 1')
    parser.add_argument(
        '--modes', default='fwd,fwdbwd',
        help='comma-separated subset of fwd,fwdbwd')
    parser.add_argument(
        '--fwdbwd-max-pixels', type=float, default=None,
        help='run fwdbwd only for sizes with at most this many pixels')
    parser.add_argument(
        '--devices', '--device', dest='devices', default='auto',
        help="comma-separated cpu,cuda; 'auto': cpu, plus cuda if present")
    parser.add_argument('--repeat', type=int, default=3,
                        help='timed passes (median)')
    parser.add_argument('--warmup', type=int, default=1,
                        help='untimed passes first')
    parser.add_argument(
        '--case-budget', type=float, default=60.,
        help='cap the timed passes of a case at about this many seconds '
        '(at least one pass)')
    parser.add_argument(
        '--time-metric', choices=['wall', 'cpu'], default='wall',
        help='what the tables and plots show: wall-clock time or process '
        'CPU time (robust to other load with --threads 1)')
    parser.add_argument(
        '--threads', type=int, default=os.cpu_count(),
        help='torch.set_num_threads in every case')
    parser.add_argument(
        '--allocators', default='default',
        help='comma-separated subset of default,no-mmap,huge-pages: '
        'allocator settings of the case processes; each case runs once per '
        'entry, side by side')
    parser.add_argument(
        '--wait-idle', type=float, default=0.,
        help='before each case wait up to this many seconds for the other '
        'processes to use less than --idle-cores (shared machines)')
    parser.add_argument(
        '--idle-cores', type=float, default=0.3,
        help='CPU use of other processes (in cores) that counts as idle')
    parser.add_argument(
        '--retries', type=int, default=0,
        help='re-run a CPU case up to this many times when it was '
        'disturbed (used < 80%% of its threads on average)')
    parser.add_argument(
        '--timeout', type=float, default=600.,
        help='seconds per case before it is reported as timed out')
    parser.add_argument('--out-dir', default='work_dirs/benchmark_backbone')
    parser.add_argument(
        '--markdown', action='store_true',
        help='print the tables as markdown (always written to benchmark.md)')
    parser.add_argument(
        '--report-only', action='store_true',
        help='redraw the tables and plots from <out-dir>/results.json')
    parser.add_argument(
        '--profile', action='store_true',
        help='print a torch.profiler table for each case (slow; for '
        'finding hot spots, not for timings)')
    parser.add_argument(
        '--worker', help=argparse.SUPPRESS)  # JSON case spec (internal)
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.warmup < 0:
        parser.error('--repeat must be >= 1 and --warmup >= 0')
    args.modes = [m for m in args.modes.split(',') if m]
    args.allocators = [a for a in args.allocators.split(',') if a]
    bad = set(args.allocators) - set(ALLOCATOR_ENV)
    if bad or not args.allocators:
        parser.error(f'unknown allocators {sorted(bad)}; choose from '
                     f'{sorted(ALLOCATOR_ENV)}')
    bad = set(args.modes) - set(MODES)
    if bad:
        parser.error(f'unknown modes {sorted(bad)}; choose from {MODES}')
    return args


# ----------------------------------------------------------------- worker
def run_case(spec: dict) -> dict:
    """Time one (model, size, mode, device) case in this process."""
    import torch
    torch.set_num_threads(spec['threads'])
    device = torch.device(spec['device'])
    cuda = device.type == 'cuda'
    torch.manual_seed(0)
    model = build_backbone(spec['model']).to(device)
    height, width = spec['size']
    image = torch.randn(1, 3, height, width, device=device)
    train = spec['mode'] == 'fwdbwd'
    model.train(train)

    def one_pass() -> None:
        with torch.set_grad_enabled(train):
            outs = model(image)
            if train:
                sum(out.float().mean() for out in outs).backward()
                model.zero_grad(set_to_none=True)

    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base_mb = torch.cuda.memory_allocated(device) / 2**20
    else:
        base_mb = current_rss_mb()

    passes = time_passes([one_pass], spec['warmup'], device)
    repeat = spec['repeat']
    if passes.passes:  # a slow case gets fewer passes; none if too slow
        repeat = max(0, min(repeat,
                            int(spec['case_budget'] / passes.wall[0][-1])))
    cold = repeat == 0
    if not cold:
        passes = time_passes([one_pass], repeat, device)
    if cuda:
        peak_mb = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        peak_mb = peak_rss_mb()
    result = dict(
        spec,
        status='ok',
        seconds=passes.median(),
        times=passes.wall[0],
        cpu_seconds=passes.median_cpu(),
        cold=cold,
        repeat=passes.passes,
        peak_mb=peak_mb,
        delta_mb=max(0., peak_mb - base_mb),
        params_m=sum(p.numel() for p in model.parameters()) / 1e6)
    if spec.get('profile'):
        from torch.profiler import ProfilerActivity, profile
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                               if cuda else [])
        with profile(activities=activities) as prof:
            one_pass()
        sort = 'self_cuda_time_total' if cuda else 'self_cpu_time_total'
        print(prof.key_averages().table(sort_by=sort, row_limit=25))
    return result


# ----------------------------------------------------------------- parent
def launch(spec: dict, timeout: float) -> dict:
    """Run one case in a subprocess; never raises for a failing case."""
    env = dict(OMP_NUM_THREADS=str(spec['threads']),
               MKL_NUM_THREADS=str(spec['threads']),
               **ALLOCATOR_ENV[spec.get('allocator', 'default')])
    return run_in_subprocess('benchmarks.backbone', spec, timeout, env,
                             echo=bool(spec.get('profile')))


def disturbed(result: dict) -> bool:
    """A multi-threaded CPU case whose threads were not kept busy
    (:func:`~benchmarks.harness.threads_were_busy`)."""
    if result['status'] != 'ok' or result['device'] != 'cpu':
        return False
    return not threads_were_busy(result['cpu_seconds'], result['seconds'],
                                 result['threads'])


def resolve_devices(text: str) -> List[str]:
    """Device list from ``--devices``."""
    if text != 'auto':
        return [d for d in text.split(',') if d]
    import torch
    return ['cpu'] + (['cuda'] if torch.cuda.is_available() else [])


def size_name(size: Sequence[int]) -> str:
    return f'{size[0]}×{size[1]}'


def series_label(result: dict) -> str:
    """Table row / plot line of a result: the model, and the allocator
    when it is not the default."""
    label = LABELS.get(result['model'], result['model'])
    allocator = result.get('allocator', 'default')
    return label if allocator == 'default' else f'{label} [{allocator}]'


def cell(result: dict, time_key: str) -> str:
    """``time / Δ memory (peak memory)``, or the failure status."""
    if result['status'] != 'ok':
        return result['status']
    cold = '*' if result.get('cold') else ''
    cold += '!' if result.get('disturbed') else ''
    return (f'{result[time_key]:.3g} s{cold} / '
            f'{result["delta_mb"] / 1024:.2f} GB '
            f'({result["peak_mb"] / 1024:.2f})')


def growth_exponent(results: List[dict], key: str) -> Optional[float]:
    """log-log slope of ``key`` between the two largest completed sizes."""
    done = sorted((r for r in results if r['status'] == 'ok'),
                  key=lambda r: r['size'][0] * r['size'][1])
    if len(done) < 2:
        return None
    small, large = done[-2], done[-1]
    pixels = (large['size'][0] * large['size'][1]) / (
        small['size'][0] * small['size'][1])
    if small[key] <= 0 or large[key] <= 0 or pixels <= 1:
        return None
    return math.log(large[key] / small[key]) / math.log(pixels)


def format_tables(results: List[dict], markdown: bool,
                  time_key: str = 'seconds') -> str:
    """One table per (device, mode): rows are models, columns sizes."""
    blocks = []
    groups = sorted({(r['device'], r['mode']) for r in results})
    for device, mode in groups:
        group = [r for r in results if (r['device'], r['mode']) == (device,
                                                                    mode)]
        sizes = sorted({tuple(r['size']) for r in group},
                       key=lambda s: s[0] * s[1])
        header = ['model'] + [size_name(s) for s in sizes] + [
            'slope t', 'slope ΔRSS' if device == 'cpu' else 'slope Δmem'
        ]
        rows = []
        for label in dict.fromkeys(map(series_label, group)):
            mine = [r for r in group if series_label(r) == label]
            by_size = {tuple(r['size']): r for r in mine}
            slopes = [growth_exponent(mine, time_key),
                      growth_exponent(mine, 'delta_mb')]
            rows.append([label] + [
                cell(by_size[s], time_key) if s in by_size else '—'
                for s in sizes
            ] + ['—' if v is None else f'{v:.2f}' for v in slopes])
        what = 'CPU time' if time_key == 'cpu_seconds' else 'time'
        threads = group[0]['threads']
        title = (f'{device}, {mode}, {threads} thread(s): median {what} / '
                 'Δ peak memory (whole-process peak)')
        if markdown:
            lines = [f'**{title}**', '', markdown_table(header, rows)]
        else:
            widths = [max(len(str(x)) for x in col)
                      for col in zip(header, *rows)]
            fmt = '  '.join(f'{{:<{w}}}' for w in widths)
            lines = [title, fmt.format(*header)]
            lines += [fmt.format(*row) for row in rows]
        blocks.append('\n'.join(lines))
    blocks.append(
        'Cells: time / Δ peak memory over the memory before the first pass '
        '(whole-process peak), GB. * = a single cold pass (the warm-up '
        'exceeded --case-budget). ! = disturbed: the case used < 80% of its '
        'threads (other load), so its wall time is not the model\'s. '
        'slope = log-log growth exponent between '
        'the two largest sizes (1 = linear in pixels, 2 = quadratic).')
    return '\n\n'.join(blocks) + '\n'


def plot(results: List[dict], key: str, ylabel: str, path: str) -> None:
    """log-log plot of ``key`` against pixels, one panel per device/mode."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    groups = sorted({(r['device'], r['mode']) for r in results})
    fig, axes = plt.subplots(
        1, len(groups), figsize=(5.5 * len(groups), 4.5), squeeze=False)
    for ax, (device, mode) in zip(axes[0], groups):
        done = [r for r in results if r['status'] == 'ok'
                and (r['device'], r['mode']) == (device, mode)]
        for label in dict.fromkeys(map(series_label, done)):
            pts = sorted((r['size'][0] * r['size'][1], r[key])
                         for r in done if series_label(r) == label)
            ax.loglog(*zip(*pts), marker='o', label=label)
        if done:
            pixels = sorted({r['size'][0] * r['size'][1] for r in done})
            first = [
                r[key] for r in done
                if r['size'][0] * r['size'][1] == pixels[0] and r[key] > 0
            ]
            if first and len(pixels) > 1:
                anchor = math.exp(sum(map(math.log, first)) / len(first))
                xs = [pixels[0], pixels[-1]]
                for slope, style in ((1, '--'), (2, ':')):
                    ax.loglog(xs, [anchor * (x / pixels[0])**slope
                                   for x in xs], 'k' + style, lw=1,
                              label=f'slope {slope}')
        sizes = sorted({tuple(r['size']) for r in done},
                       key=lambda s: s[0] * s[1])
        ax.set_xticks([h * w for h, w in sizes])
        ax.set_xticklabels([size_name(s) for s in sizes], fontsize=8)
        ax.xaxis.set_minor_formatter(NullFormatter())
        threads = done[0]['threads'] if done else '?'
        ax.set_title(f'{device}, {mode}, {threads} thread(s)')
        ax.set_xlabel('input size (log pixel count)')
        ax.set_ylabel(ylabel)
        ax.grid(True, which='both', alpha=0.3)
        if done:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cases(args: argparse.Namespace) -> List[dict]:
    """All case specs, smallest size first (so larger ones can be skipped)."""
    specs = []
    for device in resolve_devices(args.devices):
        for mode in args.modes:
            for size in sorted(args.sizes, key=lambda s: s[0] * s[1]):
                if (mode == 'fwdbwd' and args.fwdbwd_max_pixels
                        and size[0] * size[1] > args.fwdbwd_max_pixels):
                    continue
                for model in args.models:
                    for allocator in args.allocators:
                        specs.append(
                            dict(model=model, size=list(size), mode=mode,
                                 device=device, threads=args.threads,
                                 allocator=allocator, repeat=args.repeat,
                                 warmup=args.warmup,
                                 case_budget=args.case_budget,
                                 profile=args.profile))
    return specs


def run_cases(specs: List[dict], args: argparse.Namespace) -> List[dict]:
    """Run every case in turn, saving ``results.json`` after each."""
    results: List[dict] = []
    failed = set()  # (device, mode, model, allocator) failed when smaller
    start = time.perf_counter()
    for index, spec in enumerate(specs, 1):
        key = (spec['device'], spec['mode'], spec['model'],
               spec['allocator'])
        name = (f'{spec["model"]} {size_name(spec["size"])} {spec["mode"]} '
                f'{spec["device"]} {spec["allocator"]}')
        if key in failed:
            result = dict(spec, status='skipped',
                          message='a smaller size did not finish')
        else:
            for attempt in range(args.retries + 1):
                busy = wait_for_idle(args.wait_idle, args.idle_cores) \
                    if args.wait_idle > 0 else None
                result = launch(spec, args.timeout)
                result.update(busy_before=busy, attempts=attempt + 1,
                              disturbed=disturbed(result))
                if not result['disturbed']:
                    break
            if result['status'] in ('timeout', 'oom'):
                failed.add(key)
        results.append(result)
        detail = (f'{result["seconds"]:.3f} s (CPU {result["cpu_seconds"]:.3f}'
                  f' s, x{result["repeat"]}), ΔRSS {result["delta_mb"]:.0f} '
                  f'MB{", DISTURBED" if result["disturbed"] else ""}'
                  if result['status'] == 'ok' else
                  f'{result["status"]}: {result.get("message", "")}')
        print(f'[{index}/{len(specs)} {time.perf_counter() - start:.0f}s] '
              f'{name}: {detail}', flush=True)
        save_results(args.out_dir, results)
    return results


def main(argv: Optional[Sequence[str]] = None) -> List[dict]:
    args = parse_args(argv)
    if args.worker:
        worker_main(run_case, args.worker)
        return []
    os.makedirs(args.out_dir, exist_ok=True)
    if args.report_only:
        with open(osp.join(args.out_dir, 'results.json')) as f:
            results = json.load(f)
    else:
        results = run_cases(cases(args), args)
    time_key = 'cpu_seconds' if args.time_metric == 'cpu' else 'seconds'
    print(format_tables(results, args.markdown, time_key))
    with open(osp.join(args.out_dir, 'benchmark.md'), 'w') as f:
        f.write(format_tables(results, True, time_key))
    plot(results, time_key, f'median {args.time_metric} time per pass (s)',
         osp.join(args.out_dir, 'time.png'))
    plot(results, 'delta_mb', 'Δ peak memory over the built model (MB)',
         osp.join(args.out_dir, 'memory.png'))
    print(f'wrote results.json, benchmark.md, time.png, memory.png in '
          f'{args.out_dir}')
    return results


if __name__ == '__main__':
    main()
