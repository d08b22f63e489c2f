"""Measure a detector's inference speed (images per second) on CPU or GPU.

Two input sources:

* the config's test dataloader (real images through the test pipeline; data
  loading is timed separately and not counted in the model time), or
* ``--shape H W``: random images of a fixed size, no dataset needed.

The first ``--warmup`` images are run but not timed. Batch size is 1.

Examples:
    python tools/analysis_tools/benchmark_inference.py \
        configs/mask_rcnn/lf_tiny_1x.py --shape 800 1333 --device cuda
    python tools/analysis_tools/benchmark_inference.py CONFIG CKPT \
        --num-images 200 --warmup 10
"""
import argparse
import os.path as osp
import sys
from typing import Dict, Iterator, Sequence

# The harness lives next to this script; the repository root comes next so
# that a source checkout runs without installing.
sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
sys.path.insert(0, osp.dirname(osp.abspath(__file__)))

import torch  # noqa: E402
import mmlaplacian  # noqa: E402,F401
from mmdet.registry import MODELS  # noqa: E402
from mmdet.structures import DetDataSample  # noqa: E402
from mmengine.config import Config, DictAction  # noqa: E402
from mmengine.registry import init_default_scope  # noqa: E402
from mmengine.runner import Runner, load_checkpoint  # noqa: E402

from benchmark_harness import time_passes  # noqa: E402
from markdown_table import markdown_table  # noqa: E402

from mmlaplacian.engine import read_config  # noqa: E402


def parse_args(argv: Sequence[str] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Benchmark inference speed')
    parser.add_argument('config', help='config file')
    parser.add_argument(
        'checkpoint', nargs='?',
        help='checkpoint (default: random weights, same speed)')
    parser.add_argument(
        '--num-images', type=int, default=50, help='timed images')
    parser.add_argument(
        '--warmup', type=int, default=5, help='untimed images run first')
    parser.add_argument(
        '--shape', type=int, nargs=2, metavar=('H', 'W'),
        help='random inputs of this size instead of the test dataset')
    parser.add_argument('--device', default='cpu', help='cpu, cuda, cuda:1')
    parser.add_argument(
        '--threads', type=int, default=0,
        help='torch CPU threads (0: torch default)')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='override config settings: key=value pairs')
    args = parser.parse_args(argv)
    if not osp.isfile(args.config):
        parser.error(f'config file not found: {args.config}')
    if args.checkpoint and not osp.isfile(args.checkpoint):
        parser.error(f'checkpoint file not found: {args.checkpoint}')
    if args.num_images < 1 or args.warmup < 0:
        parser.error('--num-images must be >= 1 and --warmup >= 0')
    return args


def random_batches(shape: Sequence[int]) -> Iterator[dict]:
    """Endless single-image batches of random pixels."""
    height, width = shape
    generator = torch.Generator().manual_seed(0)
    while True:
        image = torch.randint(
            0, 256, (3, height, width), dtype=torch.uint8,
            generator=generator)
        sample = DetDataSample(
            metainfo=dict(
                img_shape=(height, width),
                ori_shape=(height, width),
                scale_factor=(1., 1.)))
        yield dict(inputs=[image], data_samples=[sample])


def dataset_batches(cfg: Config) -> Iterator[dict]:
    """Single-image batches of the test dataloader, cycled."""
    loader_cfg = cfg.test_dataloader.copy()
    loader_cfg.batch_size = 1
    loader = Runner.build_dataloader(loader_cfg)
    while True:
        yield from loader


def benchmark(model: torch.nn.Module, batches: Iterator[dict],
              num_images: int, warmup: int,
              device: torch.device) -> Dict[str, float]:
    """Time ``model.test_step`` per image; loading a batch is timed apart.

    Returns:
        dict: ``model_s`` and ``data_s`` (total timed seconds), ``images``.
    """
    phases = [lambda: next(batches), model.test_step]
    sync = device if device.type == 'cuda' else None
    with torch.no_grad():
        time_passes(phases, warmup, sync)
        times = time_passes(phases, num_images, sync)
    return dict(model_s=sum(times.wall[1]), data_s=sum(times.wall[0]),
                images=num_images)


def main(argv: Sequence[str] = None) -> Dict[str, float]:
    """Run the benchmark, print a table and return the numbers."""
    args = parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    cfg = read_config(args.config, args.cfg_options)
    init_default_scope(cfg.get('default_scope', 'mmdet'))
    # Speed does not depend on the weights: skip loading pretrained ones.
    cfg.model.backbone.init_cfg = None
    device = torch.device(args.device)
    model = MODELS.build(cfg.model)
    if args.checkpoint:
        load_checkpoint(model, args.checkpoint, map_location='cpu')
    else:
        model.init_weights()
    model.to(device).eval()

    batches = (random_batches(args.shape)
               if args.shape else dataset_batches(cfg))
    result = benchmark(model, batches, args.num_images, args.warmup, device)
    params = sum(p.numel() for p in model.parameters()) / 1e6
    source = ('random {}x{}'.format(*args.shape)
              if args.shape else 'test dataset')
    per_image = result['model_s'] / result['images']
    header = ('config', 'device', 'threads', 'input', 'params (M)', 'images',
              'warm-up', 'ms / image', 'images / s', 'data ms / image')
    rows = [
        (osp.basename(args.config), str(device),
         str(torch.get_num_threads()), source, f'{params:.1f}',
         str(result['images']), str(args.warmup), f'{per_image * 1e3:.1f}',
         f'{1 / per_image:.2f}',
         f'{result["data_s"] / result["images"] * 1e3:.1f}'),
    ]
    print(markdown_table(header, rows))
    result.update(images_per_s=1 / per_image, params_m=params)
    return result


if __name__ == '__main__':
    main()
