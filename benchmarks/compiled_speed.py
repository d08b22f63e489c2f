"""A backbone compiled by inductor against eager PyTorch on the CPU: the
forward (with and without freezing) and a training step.

    python -m benchmarks.compiled_speed --sizes 800x1344 1600x2688 --threads 2

Each (mode, size) case runs in a fresh Python subprocess
(:mod:`benchmarks.harness`). In it every variant gets its own copy of the
backbone (random weights, seed 0):

- ``eager``: the model as it is.
- ``inductor``: ``torch.compile(model)``.
- ``inductor+freezing`` (forward only): compiled with
  ``torch._inductor.config.freezing = True``, which turns the weights into
  constants, folds BatchNorm into the convolutions and pre-packs the linear
  weights.
- ``inductor+max-autotune`` (forward, with ``--max-autotune``): freezing,
  and each matrix product autotuned between inductor's C++ GEMM templates
  and ATen's kernels.
- ``inductor+freezing+chunked`` (forward, with ``--chunked``): the
  attention in its chunked form, as eager runs it at detection sizes,
  compiled with freezing.
- ``inductor+freezing+dynamic`` (forward, with ``--dynamic``):
  ``torch.compile(model, dynamic=True)`` with freezing, one graph for every
  input size. With a symbolic token count inductor packs float32 linear
  weights for oneDNN, as it packs bfloat16 ones (MKL's packing needs a
  fixed row count), so the GELU and residual adds after them become the
  GEMMs' post-ops without any patch.
- ``aoti+freezing`` (forward, float32, with ``--aoti``): the model
  exported at the case's size and compiled ahead of time by AOTInductor
  with freezing (:mod:`mmlaplacian.deployment.aoti_export`,
  ``tools/deployment/export_aoti.py``), then loaded and run from its
  ``.pt2`` package. Ahead-of-time compilation packs float32 linears for
  oneDNN, as it packs bfloat16 ones.
- ``...+onednn-linear`` (forward, with ``--onednn-linear``): each static
  ``inductor+freezing*`` variant again with its float32 linear layers
  packed for oneDNN instead of MKL (:mod:`benchmarks.onednn_linear`).

``--precisions fp32 bf16`` adds each variant under CPU bfloat16 autocast
(``eager+bf16``, ``inductor+bf16``, ...), as ``tools/test.py --amp`` runs
the backbone: the matrix products and convolutions in bfloat16, our
operators in float32. It pays off on CPUs with AMX or AVX512-BF16.

The first call of a compiled variant compiles it; its wall time is the
``first call`` column. Then every variant runs ``--warmup`` untimed passes,
and ``--repeat`` rounds run each variant once in turn, so that other load on
a shared machine hits all of them alike; ``--wait-idle`` first waits for the
other processes to go idle. When a variant did not keep its threads busy
(:func:`~benchmarks.harness.threads_were_busy`) its figures are marked
disturbed, and the rounds are run again (``--retries``).

Modes:

- ``fwd``: eval mode under ``torch.no_grad()``; ``max |Δ|`` is the largest
  difference of any output from float32 eager's on the same image, and
  ``rel. error`` the largest ``‖Δ‖ / ‖eager‖`` of an output. Eager runs the
  attention's chunked CPU form at detection sizes; compiled code runs its
  full form, whose graph does not depend on the size.
- ``train``: train mode, one SGD step (zero the gradients, forward, backward
  of the summed means of the output maps, ``optimizer.step()``); the model
  is compiled, the loss and the optimizer step run eager.

Output in ``--out-dir``: ``results.json`` and ``compiled_speed.md``.

Examples:
    python -m benchmarks.compiled_speed --modes fwd --sizes 800x1344
    python -m benchmarks.compiled_speed --sizes 800x1344 \\
        --precisions fp32 bf16
    python -m benchmarks.compiled_speed --sizes 800x1344 --threads 2 \\
        --repeat 5 --allocator no-mmap --wait-idle 300
"""
from __future__ import annotations

import argparse
import copy
import os
import os.path as osp
import statistics
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence

import torch

from benchmarks.backbone import ALLOCATOR_ENV, parse_size, size_name
from benchmarks.harness import (publish_table, run_in_subprocess,
                                save_results, threads_were_busy, time_passes,
                                wait_for_idle, worker_main)
from benchmarks.models import LABELS, MODEL_ZOO, build_backbone
from benchmarks.onednn_linear import onednn_linear_packing
from benchmarks.tables import markdown_table
from mmlaplacian.deployment.aoti_export import export_aoti, load_aoti
from mmlaplacian.models.layers import LaplacianAttention

MODES = ('fwd', 'train')
VARIANTS = {
    'fwd': ('eager', 'inductor', 'inductor+freezing'),
    'train': ('eager', 'inductor'),
}
PRECISIONS = ('fp32', 'bf16')
BF16 = '+bf16'
# Inductor's own C++ GEMM templates, autotuned against ATen's per shape.
# Its epilogue fusion stays off: torch 2.13's batched-GEMM template fails
# to render the attention's baddbmm with a fused epilogue.
MAX_AUTOTUNE = 'inductor+max-autotune'
MAX_AUTOTUNE_OPTIONS = {'freezing': True, 'max_autotune': True,
                        'max_autotune_gemm_backends': 'CPP,ATEN',
                        'epilogue_fusion': False}


# The attention's chunked form (mode='chunked'), which eager runs at
# detection sizes, compiled with freezing; compiled code otherwise runs the
# full form.
CHUNKED = 'inductor+freezing+chunked'
# Freezing with symbolic sizes: one graph for all input sizes.
DYNAMIC = 'inductor+freezing+dynamic'
# Ahead-of-time compilation (AOTInductor) with freezing, float32 only.
AOTI = 'aoti+freezing'
# A freezing variant with its float32 linear weights packed for oneDNN.
ONEDNN_LINEAR = '+onednn-linear'


def variant_names(mode: str, precisions: Sequence[str],
                  max_autotune: bool = False,
                  chunked: bool = False,
                  onednn_linear: bool = False,
                  dynamic: bool = False,
                  aoti: bool = False) -> List[str]:
    """The variants of ``mode``, each in every one of ``precisions``; with
    ``max_autotune`` the forward also gets :data:`MAX_AUTOTUNE`, with
    ``chunked`` :data:`CHUNKED`, with ``dynamic`` :data:`DYNAMIC`, with
    ``aoti`` :data:`AOTI` (float32 only: the package runs float32), with
    ``onednn_linear`` each static ``inductor+freezing*`` variant again with
    :data:`ONEDNN_LINEAR` (float32 only: in bfloat16, and with symbolic
    sizes, inductor packs for oneDNN anyway). Precisions come in the order
    given."""
    names = list(VARIANTS[mode])
    if max_autotune and mode == 'fwd':
        names.append(MAX_AUTOTUNE)
    if chunked and mode == 'fwd':
        names.append(CHUNKED)
    if dynamic and mode == 'fwd':
        names.append(DYNAMIC)
    onednn = [name + ONEDNN_LINEAR for name in names
              if onednn_linear and name.startswith('inductor+freezing')
              and name != DYNAMIC]
    float32_only = [AOTI] if aoti and mode == 'fwd' else []
    return [variant for precision in precisions
            for variant in ([*names, *float32_only, *onednn]
                            if precision == 'fp32'
                            else [name + BF16 for name in names])]


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Inductor-compiled backbone against eager on the CPU')
    parser.add_argument(
        '--model', default='lf_tiny',
        help=f'a shortcut ({", ".join(MODEL_ZOO)}) or a config file')
    parser.add_argument('--sizes', nargs='+', type=parse_size,
                        default=[(800, 1344), (1600, 2688)],
                        help='input sizes HxW, batch 1')
    parser.add_argument('--modes', default='fwd,train',
                        help='comma-separated subset of fwd,train')
    parser.add_argument(
        '--train-max-pixels', type=float, default=800 * 1344,
        help='run train only for sizes with at most this many pixels')
    parser.add_argument('--precisions', nargs='+', choices=PRECISIONS,
                        default=['fp32'],
                        help='bf16: every variant again under CPU bfloat16 '
                        'autocast')
    parser.add_argument(
        '--max-autotune', action='store_true',
        help=f'forward: add {MAX_AUTOTUNE} (freezing, and inductor\'s C++ '
        'GEMMs autotuned against ATen\'s; minutes more of compilation)')
    parser.add_argument(
        '--chunked', action='store_true',
        help=f'forward: add {CHUNKED} (the attention\'s chunked form '
        'compiled; minutes more of compilation)')
    parser.add_argument(
        '--onednn-linear', action='store_true',
        help='forward: add each float32 inductor+freezing variant again '
        'with its linear layers packed for oneDNN instead of MKL '
        f'({ONEDNN_LINEAR})')
    parser.add_argument(
        '--dynamic', action='store_true',
        help=f'forward: add {DYNAMIC} (freezing with dynamic=True: one '
        'graph for all sizes, float32 linears packed for oneDNN by '
        'inductor itself; minutes more of compilation)')
    parser.add_argument(
        '--aoti', action='store_true',
        help=f'forward: add {AOTI} (exported and compiled ahead of time '
        'into an AOTInductor package, as tools/deployment/export_aoti.py '
        'makes it; float32)')
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--repeat', type=int, default=3,
                        help='interleaved timed rounds (median)')
    parser.add_argument('--warmup', type=int, default=1,
                        help='untimed passes of each variant first')
    parser.add_argument('--retries', type=int, default=1,
                        help='times to rerun the rounds when one was '
                        'disturbed')
    parser.add_argument('--allocator', default='default',
                        choices=list(ALLOCATOR_ENV),
                        help='malloc settings of the case processes (see '
                        'benchmarks.backbone)')
    parser.add_argument('--timeout', type=float, default=3600.,
                        help='seconds per case, compilation included')
    parser.add_argument('--wait-idle', type=float, default=0.,
                        help='before the timed rounds of each case, wait up '
                        'to this many seconds for the other processes to go '
                        'idle')
    parser.add_argument('--idle-cores', type=float, default=0.3,
                        help='busy cores that count as idle')
    parser.add_argument(
        '--profile', action='store_true',
        help='after timing, profile one pass of each variant: print its '
        'top operators (by input shape; inductor\'s generated kernels by '
        'name) and table its time by kind of kernel')
    parser.add_argument('--out-dir', default='work_dirs/compiled_speed')
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.modes = [m for m in args.modes.split(',') if m]
    bad = set(args.modes) - set(MODES)
    if bad:
        parser.error(f'unknown modes {sorted(bad)}; choose from {MODES}')
    if args.repeat < 1 or args.warmup < 0 or args.retries < 0:
        parser.error('--repeat must be >= 1, --warmup and --retries >= 0')
    return args


# ----------------------------------------------------------------- worker
def compiled_variant(model, variant: str):
    """``model`` as ``variant`` runs it.

    Args:
        model (nn.Module): The variant's own copy of the model.
        variant (str): ``'eager'``, ``'inductor'`` or
            ``'inductor+freezing'``, :data:`MAX_AUTOTUNE`, :data:`CHUNKED`,
            :data:`DYNAMIC` or :data:`AOTI`
            (a ``'+bf16'`` or :data:`ONEDNN_LINEAR` suffix is ignored
            here: the caller applies those).

    Returns:
        tuple: The callable, and the inductor config (a dict for
        ``torch._inductor.config.patch``) its first call, the compilation,
        must run under.
    """
    variant = variant.removesuffix(BF16).removesuffix(ONEDNN_LINEAR)
    if variant == 'eager':
        return model, {}
    if variant == 'inductor':
        return torch.compile(model), {}
    if variant == MAX_AUTOTUNE:
        return (torch.compile(model, options=MAX_AUTOTUNE_OPTIONS),
                MAX_AUTOTUNE_OPTIONS)
    if variant == AOTI:
        return aoti_package_on_first_call(model), {}
    if variant == CHUNKED:
        for module in model.modules():
            if isinstance(module, LaplacianAttention):
                module.mode = 'chunked'
    # The options make this backend unequal to the plain one, so dynamo
    # compiles this copy anew instead of reusing that variant's code for
    # another instance of the class; the config patch is what pre-packs the
    # linear weights (the options alone freeze without packing). None is
    # torch.compile's default, automatic dynamic shapes.
    return (torch.compile(model, dynamic=True if variant == DYNAMIC else None,
                          options={'freezing': True}), {'freezing': True})


def aoti_package_on_first_call(model) -> Callable:
    """A callable that, at its first call, exports ``model`` at that
    input's size into an AOTInductor package (in a temporary folder) and
    from then on runs the loaded package: the compilation is the first
    call's, as for the other variants."""
    folder = tempfile.TemporaryDirectory(prefix='compiled_speed_aoti_')
    package = None

    def run(image):
        nonlocal package
        if package is None:
            path = export_aoti(model, image,
                               osp.join(folder.name, 'model.pt2')).path
            package = load_aoti(path)
        return package(image)

    # run refers to the folder, which lives (and is removed) with it.
    return run


def forward_pass(run: Callable, image,
                 bf16: bool = False) -> Callable[[], object]:
    """A callable running ``run(image)`` under ``torch.no_grad()`` (and
    CPU bfloat16 autocast with ``bf16``)."""

    def one_pass():
        with torch.no_grad(), _autocast(bf16):
            return run(image)

    return one_pass


def _autocast(bf16: bool):
    return torch.autocast('cpu', dtype=torch.bfloat16, enabled=bf16)


def _train_step(run: Callable, model, image,
                bf16: bool = False) -> Callable[[], None]:
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def one_step():
        optimizer.zero_grad(set_to_none=True)
        with _autocast(bf16):
            outs = run(image)
        loss = sum(out.float().mean() for out in outs)
        loss.backward()
        optimizer.step()

    return one_step


def _max_difference(outs, reference) -> float:
    return max((a.float() - b).abs().max().item()
               for a, b in zip(outs, reference))


def _relative_error(outs, reference) -> float:
    return max(((a.float() - b).norm() / b.norm()).item()
               for a, b in zip(outs, reference))


def time_rounds(passes: Dict[str, Callable], repeat: int,
                threads: int) -> Dict[str, dict]:
    """``repeat`` rounds of one pass of every variant in turn.

    Returns:
        dict: Per variant: ``times`` (wall seconds per round), ``seconds``
        and ``cpu_seconds`` (medians) and ``disturbed`` (whether the median
        pass kept fewer than 80% of its threads busy).
    """
    wall = {name: [] for name in passes}
    cpu = {name: [] for name in passes}
    for _ in range(repeat):
        for name, one_pass in passes.items():
            times = time_passes([one_pass], 1)
            wall[name] += times.wall[0]
            cpu[name] += times.cpu
    results = {}
    for name in passes:
        seconds = statistics.median(wall[name])
        cpu_seconds = statistics.median(cpu[name])
        results[name] = dict(
            times=wall[name], seconds=seconds, cpu_seconds=cpu_seconds,
            disturbed=not threads_were_busy(cpu_seconds, seconds, threads))
    return results


# Where a profiled pass spends its time: the first group whose pattern
# occurs in an operator's name takes its self time.
TIME_GROUPS = (
    ('generated kernels', ('_cpp_fused_', )),
    ('GEMMs', ('addmm', 'aten::mm', 'bmm', 'linear')),
    ('convolutions', ('convolution', )),
    ('softmax attention', ('scaled_dot_product', )),
    ('our operators', ('mmlaplacian::', )),
    ('copies', ('aten::copy_', )),
)


def time_shares(events) -> Dict[str, float]:
    """Shares of the self CPU time of profiler ``events`` by
    :data:`TIME_GROUPS` (and ``other``)."""
    shares = dict.fromkeys([name for name, _ in TIME_GROUPS] + ['other'], 0.)
    for event in events:
        group = next((name for name, patterns in TIME_GROUPS
                      if any(p in event.key for p in patterns)), 'other')
        shares[group] += event.self_cpu_time_total
    total = sum(shares.values()) or 1.
    return {name: value / total for name, value in shares.items()}


def print_profile(name: str, one_pass: Callable) -> Dict[str, float]:
    """Profile one pass: print its top operators by input shape, and return
    :func:`time_shares` of its time. The operators outside inductor's
    generated kernels are eager kernels that compiled code calls as they
    are (GEMMs, convolutions, attention, our operators)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU],
                 record_shapes=True) as prof:
        one_pass()
    events = prof.key_averages(group_by_input_shape=True)
    print(f'== {name}')
    print(events.table(sort_by='self_cpu_time_total', row_limit=20,
                       max_name_column_width=50, max_shapes_column_width=60))
    shares = time_shares(events)
    print(f'{name}: ' + ', '.join(f'{group} {share:.1%}'
                                  for group, share in shares.items()),
          flush=True)
    return shares


def run_case(spec: dict) -> dict:
    """Build, compile and time every variant of one (mode, size) case."""
    torch.set_num_threads(spec['threads'])
    # Inductor's generated kernels then appear in the profiler by name.
    torch._inductor.config.cpp.enable_kernel_profile = spec['profile']
    torch.manual_seed(0)
    base = build_backbone(spec['model'])
    train = spec['mode'] == 'train'
    base.train(train)
    image = torch.randn(1, 3, *spec['size'])
    reference = None
    if not train:
        with torch.no_grad():
            reference = base(image)

    passes, first_call, differences, errors = {}, {}, {}, {}
    for variant in variant_names(spec['mode'], spec['precisions'],
                                 spec.get('max_autotune', False),
                                 spec.get('chunked', False),
                                 spec.get('onednn_linear', False),
                                 spec.get('dynamic', False),
                                 spec.get('aoti', False)):
        model = copy.deepcopy(base)
        run, patches = compiled_variant(model, variant)
        bf16 = variant.endswith(BF16)
        one_pass = (_train_step(run, model, image, bf16)
                    if train else forward_pass(run, image, bf16))
        start = time.perf_counter()
        # The packing is chosen as the first call compiles.
        wants_onednn = variant.endswith(ONEDNN_LINEAR)
        with torch._inductor.config.patch(patches), onednn_linear_packing(
                wants_onednn) as packs_for_onednn:
            if wants_onednn and not packs_for_onednn:
                raise RuntimeError(
                    f'{variant}: this torch\'s packing pass cannot be set '
                    'to oneDNN, so the variant would time torch\'s own')
            outs = one_pass()
        first_call[variant] = time.perf_counter() - start
        if reference is not None:
            differences[variant] = _max_difference(outs, reference)
            errors[variant] = _relative_error(outs, reference)
        passes[variant] = one_pass

    for one_pass in passes.values():
        time_passes([one_pass], spec['warmup'])
    for attempt in range(spec['retries'] + 1):
        # After the compilations, which take minutes: wait for the other
        # processes right before the rounds.
        if spec['wait_idle'] > 0:
            wait_for_idle(spec['wait_idle'], spec['idle_cores'])
        load_before = os.getloadavg()[0]
        timed = time_rounds(passes, spec['repeat'], spec['threads'])
        if not any(result['disturbed'] for result in timed.values()):
            break
    for variant, result in timed.items():
        result.update(first_call_seconds=first_call[variant],
                      max_abs_diff=differences.get(variant),
                      relative_error=errors.get(variant))
        if spec['profile']:
            result['time_shares'] = print_profile(
                f'{spec["mode"]} {variant}', passes[variant])
    return dict(spec, variants=timed, attempts=attempt + 1,
                load_before=load_before, load_after=os.getloadavg()[0])


# ----------------------------------------------------------------- parent
def cases(args: argparse.Namespace) -> List[dict]:
    """Case specs, forward cases first, smallest size first."""
    specs = []
    for mode in args.modes:
        for size in sorted(args.sizes, key=lambda s: s[0] * s[1]):
            if mode == 'train' and size[0] * size[1] > args.train_max_pixels:
                continue
            specs.append(dict(model=args.model, mode=mode, size=list(size),
                              precisions=list(args.precisions),
                              max_autotune=args.max_autotune,
                              chunked=args.chunked,
                              onednn_linear=args.onednn_linear,
                              dynamic=args.dynamic, aoti=args.aoti,
                              threads=args.threads, repeat=args.repeat,
                              warmup=args.warmup, retries=args.retries,
                              allocator=args.allocator,
                              wait_idle=args.wait_idle,
                              idle_cores=args.idle_cores,
                              profile=args.profile))
    return specs


def case_env(spec: dict) -> Dict[str, Optional[str]]:
    """Environment of a case subprocess: the thread count and malloc
    settings of ``spec`` (``threads``, ``allocator``)."""
    return dict(OMP_NUM_THREADS=str(spec['threads']),
                MKL_NUM_THREADS=str(spec['threads']),
                **ALLOCATOR_ENV[spec['allocator']])


def launch(spec: dict, timeout: float) -> dict:
    """Run one case in a subprocess; never raises for a failing case."""
    return run_in_subprocess('benchmarks.compiled_speed', spec, timeout,
                             case_env(spec), echo=spec['profile'])


HEADER = ['mode', 'size', 'variant', 'median s', 'speed-up',
          'vs fp32 eager', 'CPU s', 'CPU speed-up', 'first call s',
          'max |Δ| vs eager', 'rel. error', 'load avg']


def table_rows(results: List[dict]) -> List[List[str]]:
    """One row per (case, variant); failed cases get one row."""
    rows = []
    for result in results:
        case = [result['mode'], size_name(result['size'])]
        if result['status'] != 'ok':
            # The status and message, the other columns empty.
            row = case + [result['status'], result.get('message', '')[:60]]
            rows.append(row + [''] * (len(HEADER) - len(row)))
            continue
        variants = result['variants']
        fp32_eager = variants.get('eager')
        load = f'{result["load_before"]:.1f}→{result["load_after"]:.1f}'
        for name, variant in variants.items():
            # Speed-ups against eager in the variant's own precision.
            eager = variants['eager' + BF16 if name.endswith(BF16) else
                             'eager']
            mark = '!' if variant['disturbed'] else ''
            diff = variant['max_abs_diff']
            error = variant.get('relative_error')
            rows.append(case + [
                name, f'{variant["seconds"]:.3f}{mark}',
                f'{eager["seconds"] / variant["seconds"]:.2f}×',
                '—' if fp32_eager is None else
                f'{fp32_eager["seconds"] / variant["seconds"]:.2f}×',
                f'{variant["cpu_seconds"]:.3f}',
                f'{eager["cpu_seconds"] / variant["cpu_seconds"]:.2f}×',
                f'{variant["first_call_seconds"]:.1f}',
                '—' if diff is None else f'{diff:.1e}',
                '—' if error is None else f'{error:.1e}', load
            ])
    return rows


def format_table(results: List[dict]) -> str:
    first = results[0]
    title = (f'{LABELS.get(first["model"], first["model"])}, '
             f'{first["threads"]} thread(s), allocator {first["allocator"]}'
             f': median of {first["repeat"]} interleaved rounds')
    note = ('speed-up: time of eager in the same precision / variant time; '
            'vs fp32 eager: float32 eager time / variant time. rel. error: '
            'largest ‖Δ‖ / ‖float32 eager‖ of an output. CPU s: median '
            'process CPU '
            'time of a round (all threads); with one thread it depends least '
            'on other load. first call: the first pass, '
            'compilation included. ! = disturbed (the pass kept under 80% of '
            'its threads busy: other load). load avg: 1-minute load average '
            'before → after the timed rounds.')
    text = (f'**{title}**\n\n' +
            markdown_table(HEADER, table_rows(results), 'lll' + 'r' * 8 + 'l') +
            f'\n\n{note}\n')
    profiled = [(result, name, variant) for result in results
                if result['status'] == 'ok'
                for name, variant in result['variants'].items()
                if 'time_shares' in variant]
    if profiled:
        groups = list(profiled[0][2]['time_shares'])
        rows = [[result['mode'], size_name(result['size']), name] +
                [f'{variant["time_shares"][g]:.1%}' for g in groups]
                for result, name, variant in profiled]
        text += ('\n**Self CPU time of one profiled pass, by kind of '
                 'kernel**\n\n' +
                 markdown_table(['mode', 'size', 'variant'] + groups, rows,
                                'lll' + 'r' * len(groups)) + '\n')
    return text


def main(argv: Optional[Sequence[str]] = None) -> List[dict]:
    args = parse_args(argv)
    if args.worker:
        worker_main(run_case, args.worker)
        return []
    os.makedirs(args.out_dir, exist_ok=True)
    results = []
    for spec in cases(args):
        result = launch(spec, args.timeout)
        results.append(result)
        print(f'{spec["mode"]} {size_name(spec["size"])}: '
              f'{result["status"]} {result.get("message", "")}', flush=True)
        save_results(args.out_dir, results)
    publish_table(args.out_dir, 'compiled_speed.md', format_table(results))
    return results


if __name__ == '__main__':
    main()
