"""How close backbone forwards come to this machine's GEMM rate: achieved
multiply-accumulates per second, eager, compiled and in ExecuTorch, against
``torch.mm`` (fp32) and ``torch._int_mm`` (int8) measured in the same
process.

    python -m benchmarks.mac_rate --models lf_tiny swin_t --size 800x1344

Each model runs in a fresh Python subprocess (:mod:`benchmarks.harness`). Its
multiply-accumulates are counted once by tracing the built model
(:func:`mmlaplacian.utils.flops.count_model_flops`: the same counts as
``tools/analysis_tools/get_flops.py``). Then ``--repeat`` rounds run, in turn,
one product of two ``--gemm-size`` square matrices in fp32 (``torch.mm``)
and in int8 (``torch._int_mm``, int32 accumulation), and one forward of each
variant (eval mode, ``torch.no_grad()``, random weights; the forward
variants of :mod:`benchmarks.compiled_speed`, ``aoti+freezing`` (the
AOTInductor package) included; ``executorch-fp32`` / ``-int8``: the
backbone lowered to XNNPACK, int8 calibrated on 8 images of
``--calibration-images``; ``executorch-operator-fp32`` / ``-int8``: the
same with the Laplacian kernel and LayerNorm run by our ExecuTorch kernels;
the programs kept in ``--out-dir`` for the next run), all on ``--threads``
threads, after one warm-up call of each. A rate is MACs /
median seconds; ``share`` is a forward's rate over the fp32 GEMM rate of the
same run (an int8 program's too: int8 GEMMs are the faster ceiling).

Output in ``--out-dir``: ``results.json`` and ``mac_rate.md``.

Examples:
    python -m benchmarks.mac_rate --models lf_tiny --variants eager
    python -m benchmarks.mac_rate --variants eager,inductor,executorch-fp32,executorch-int8
    python -m benchmarks.mac_rate --size 1600x2688 --allocator no-mmap
"""
from __future__ import annotations

import argparse
import copy
import os
import os.path as osp
from typing import Callable, Dict, List, Optional, Sequence

import torch

from benchmarks.backbone import ALLOCATOR_ENV, parse_size, size_name
from benchmarks.compiled_speed import (AOTI, VARIANTS, case_env,
                                       compiled_variant, forward_pass,
                                       time_rounds)
from benchmarks.harness import (REPO_ROOT, publish_table, run_in_subprocess,
                                save_results, time_passes, worker_main)
from benchmarks.models import LABELS, MODEL_ZOO, build_backbone
from benchmarks.runtime_speed import (CALIBRATION_IMAGES, laplace_form,
                                      program_suffix)
from benchmarks.tables import markdown_table

GEMMS = ('fp32 GEMM', 'int8 GEMM')
# ``executorch-operator-*``: the Laplacian kernel as our operator, run with
# LayerNorm by our ExecuTorch kernels (runtime_speed.laplace_form).
EXECUTORCH_VARIANTS = ('executorch-fp32', 'executorch-int8',
                       'executorch-operator-fp32', 'executorch-operator-int8')
# The forward variants of benchmarks.compiled_speed that this tool runs.
COMPILED_VARIANTS = (*VARIANTS['fwd'], AOTI)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Achieved MAC/s of backbone forwards against the GEMM '
        'rates of this machine')
    parser.add_argument(
        '--models', nargs='+', default=['lf_tiny', 'swin_t'],
        help=f'shortcuts ({", ".join(MODEL_ZOO)}) or config files')
    parser.add_argument('--size', type=parse_size, default=(800, 1344),
                        help='input size HxW, batch 1')
    parser.add_argument('--variants', default='eager,inductor',
                        help='comma-separated subset of ' +
                        ','.join(COMPILED_VARIANTS + EXECUTORCH_VARIANTS))
    parser.add_argument('--gemm-size', type=int, default=2048,
                        help='side of the square matrices of the GEMMs')
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--repeat', type=int, default=5,
                        help='interleaved timed rounds (median)')
    parser.add_argument('--allocator', default='default',
                        choices=list(ALLOCATOR_ENV))
    parser.add_argument('--timeout', type=float, default=3600.,
                        help='seconds per model, compilation included')
    parser.add_argument('--calibration-images', default=osp.join(
        REPO_ROOT, CALIBRATION_IMAGES), help='int8 ExecuTorch programs '
        'calibrate on 8 of these images')
    parser.add_argument('--out-dir', default='work_dirs/mac_rate')
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.variants = [v for v in args.variants.split(',') if v]
    known = COMPILED_VARIANTS + EXECUTORCH_VARIANTS
    bad = set(args.variants) - set(known)
    if bad:
        parser.error(f'unknown variants {sorted(bad)}; choose from {known}')
    if args.repeat < 1 or args.gemm_size < 1:
        parser.error('--repeat and --gemm-size must be >= 1')
    return args


# ----------------------------------------------------------------- worker
def gemm_passes(side: int) -> Dict[str, Callable[[], object]]:
    """One fp32 and one int8 product of two ``side`` square matrices."""
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(side, side, generator=generator) for _ in range(2))
    a8, b8 = (torch.randint(-128, 128, (side, side), dtype=torch.int8,
                            generator=generator) for _ in range(2))
    return {'fp32 GEMM': lambda: torch.mm(a, b),
            'int8 GEMM': lambda: torch._int_mm(a8, b8)}


def executorch_pass(base: torch.nn.Module, image: torch.Tensor,
                    variant: str, spec: dict) -> Callable[[], object]:
    """One forward of the backbone's ExecuTorch program, lowered to
    ``spec['out_dir']`` unless it is there already."""
    from mmlaplacian.deployment import BackboneForExport
    from mmlaplacian.deployment.executorch_export import export_executorch
    from mmlaplacian.deployment.executorch_kernels import load_program
    precision = variant.split('-')[-1]
    name = osp.splitext(osp.basename(spec['model']))[0]
    path = osp.join(
        spec['out_dir'],
        '{}_{}x{}.{}.pte'.format(name, *spec['size'], program_suffix(variant)))
    if not osp.exists(path):
        calibration = None
        if precision == 'int8':
            from mmlaplacian.deployment.calibration import calibration_inputs
            calibration = calibration_inputs(spec['calibration_images'],
                                             spec['size'], 8, normalize=True)
        export_executorch(BackboneForExport(copy.deepcopy(base)), image, path,
                          laplace=laplace_form(variant),
                          quantize='int8' if calibration else None,
                          calibration=calibration)
    method = load_program(path).load_method('forward')
    return lambda: method.execute([image])


def run_case(spec: dict) -> dict:
    """Count one model's MACs, then time the GEMMs and its variants."""
    from mmlaplacian.utils.flops import count_model_flops
    torch.set_num_threads(spec['threads'])
    torch.manual_seed(0)
    base = build_backbone(spec['model'])
    image = torch.randn(1, 3, *spec['size'])
    macs = count_model_flops(base, (image, )).flops
    passes = gemm_passes(spec['gemm_size'])
    first_call = {}
    for variant in spec['variants']:
        patches = {}
        if variant in EXECUTORCH_VARIANTS:
            passes[variant] = executorch_pass(base, image, variant, spec)
        else:
            run, patches = compiled_variant(copy.deepcopy(base), variant)
            passes[variant] = forward_pass(run, image)
        with torch._inductor.config.patch(patches):
            first_call[variant] = time_passes([passes[variant]], 1).wall[0][0]
    for name in GEMMS:
        time_passes([passes[name]], 1)
    for variant in spec['variants']:
        time_passes([passes[variant]], 1)
    load_before = os.getloadavg()[0]
    timed = time_rounds(passes, spec['repeat'], spec['threads'])
    gemm_macs = spec['gemm_size']**3
    for name, result in timed.items():
        result['macs_per_second'] = (gemm_macs if name in GEMMS else
                                     macs) / result['seconds']
        result['first_call_seconds'] = first_call.get(name)
    return dict(spec, macs=macs, rates=timed, load_before=load_before,
                load_after=os.getloadavg()[0])


# ----------------------------------------------------------------- parent
def table_header(variants: Sequence[str]) -> List[str]:
    """The table's column titles for these variants."""
    return ['model', 'GMAC', 'fp32 GEMM GMAC/s', 'int8 GEMM GMAC/s'] + [
        f'{variant}: s, GMAC/s (share)' for variant in variants
    ] + ['load avg']


def table_rows(results: List[dict]) -> List[List[str]]:
    """One row per model: its MACs, the GEMM rates, each variant's rate."""
    rows = []
    for result in results:
        label = LABELS.get(result['model'], result['model'])
        if result['status'] != 'ok':
            # The status and message, the other columns empty.
            row = [label, result['status'], result.get('message', '')[:60]]
            width = len(table_header(result['variants']))
            rows.append(row + [''] * (width - len(row)))
            continue
        rates = result['rates']
        fp32 = rates['fp32 GEMM']['macs_per_second']
        row = [label, f'{result["macs"] / 1e9:.3g}', f'{fp32 / 1e9:.0f}',
               f'{rates["int8 GEMM"]["macs_per_second"] / 1e9:.0f}']
        for variant in result['variants']:
            rate = rates[variant]
            mark = '!' if rate['disturbed'] else ''
            row.append(f'{rate["seconds"]:.3f} s{mark}: '
                       f'{rate["macs_per_second"] / 1e9:.1f} '
                       f'({rate["macs_per_second"] / fp32:.2f})')
        rows.append(row + [
            f'{result["load_before"]:.1f}→{result["load_after"]:.1f}'])
    return rows


def format_table(results: List[dict]) -> str:
    first = results[0]
    header = table_header(first['variants'])
    title = (f'{size_name(first["size"])}, {first["threads"]} thread(s), '
             f'allocator {first["allocator"]}: median of {first["repeat"]} '
             f'interleaved rounds; GEMMs of {first["gemm_size"]}² matrices')
    note = ('share: the forward\'s MAC/s over the fp32 GEMM rate of the same '
            'run. ! = disturbed (the pass kept under 80% of its threads '
            'busy: other load). load avg: 1-minute load average before → '
            'after the timed rounds.')
    align = 'lrrr' + 'r' * len(first['variants']) + 'l'
    return (f'**{title}**\n\n' +
            markdown_table(header, table_rows(results), align) +
            f'\n\n{note}\n')


def main(argv: Optional[Sequence[str]] = None) -> List[dict]:
    args = parse_args(argv)
    if args.worker:
        worker_main(run_case, args.worker)
        return []
    os.makedirs(args.out_dir, exist_ok=True)
    results = []
    for model in args.models:
        spec = dict(model=model, size=list(args.size),
                    variants=args.variants, gemm_size=args.gemm_size,
                    threads=args.threads, repeat=args.repeat,
                    allocator=args.allocator, out_dir=args.out_dir,
                    calibration_images=args.calibration_images)
        result = run_in_subprocess('benchmarks.mac_rate', spec, args.timeout,
                                   case_env(spec))
        results.append(result)
        print(f'{model}: {result["status"]} {result.get("message", "")}',
              flush=True)
        save_results(args.out_dir, results)
    publish_table(args.out_dir, 'mac_rate.md', format_table(results))
    return results


if __name__ == '__main__':
    main()
