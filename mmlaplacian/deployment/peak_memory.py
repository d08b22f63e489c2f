"""Peak memory of one inference, measured in a fresh process.

``python -m mmlaplacian.deployment.peak_memory ort MODEL.onnx --shape H W``
``python -m mmlaplacian.deployment.peak_memory torch CONFIG [--checkpoint C]
--shape H W [--backbone-only]``

Prints one JSON line: the resident set size before the first inference
(runtime, libraries and weights loaded), the peak over the inferences
(``VmHWM``), and their difference, in MiB (Linux). A fresh process keeps the
export and the other runtime out of the figure.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Dict, List, Optional, Sequence


def _rss_mib() -> float:
    with open('/proc/self/statm', encoding='ascii') as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf('SC_PAGE_SIZE') / 2**20


def _peak_mib() -> float:
    # VmHWM: this process image's own high-water mark. ru_maxrss would
    # include the parent's size at fork (Linux carries it across exec).
    with open('/proc/self/status', encoding='ascii') as f:
        for line in f:
            if line.startswith('VmHWM:'):
                return int(line.split()[1]) / 1024
    raise RuntimeError('no VmHWM in /proc/self/status (Linux only)')


def _measure(run, runs: int) -> Dict[str, float]:
    before = _rss_mib()
    for _ in range(runs):
        run()
    peak = _peak_mib()
    return dict(loaded_mib=round(before, 1),
                peak_mib=round(peak, 1),
                inference_mib=round(peak - before, 1))


def _input(shape: Sequence[int], detector: bool):
    import torch
    generator = torch.Generator().manual_seed(0)
    if detector:
        return torch.rand(1, 3, *shape, generator=generator) * 255
    return torch.randn(1, 3, *shape, generator=generator)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('runtime', choices=('ort', 'torch'))
    parser.add_argument('model', help='.onnx file (ort) or config (torch)')
    parser.add_argument('--checkpoint')
    parser.add_argument('--shape', type=int, nargs=2, required=True)
    parser.add_argument('--backbone-only', action='store_true')
    parser.add_argument('--runs', type=int, default=2)
    parser.add_argument('--threads', type=int, default=0)
    parser.add_argument('--no-arena',
                        action='store_true',
                        help="onnxruntime without its CPU memory arena")
    args = parser.parse_args(argv)

    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    detector = not args.backbone_only
    image = _input(args.shape, detector)
    if args.runtime == 'ort':
        from .runtime import ort_run, ort_session
        session = ort_session(args.model, arena=not args.no_arena)
        stats = _measure(lambda: ort_run(session, image), args.runs)
    else:
        from mmlaplacian.engine import read_config
        from .reference import build_model, mmdet_predict
        model = build_model(read_config(args.model), args.checkpoint)

        def run():
            with torch.no_grad():
                if detector:
                    mmdet_predict(model, image)
                else:
                    model.backbone(image)

        stats = _measure(run, args.runs)
    print(json.dumps(stats))


def measure_in_subprocess(args: Sequence[str],
                          timeout: float = 1800) -> Dict[str, float]:
    """Run this module with ``args`` in a new interpreter; its JSON line."""
    out = subprocess.run(
        [sys.executable, '-m', 'mmlaplacian.deployment.peak_memory', *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=timeout)
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == '__main__':
    main()
