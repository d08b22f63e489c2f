"""Save a dataset's images with their ground truth drawn, after the pipeline.

What the model is trained on is what gets drawn: boxes, class names and
masks of ``train_dataloader`` (or ``--split val``), after resizing, flips and
crops.

Example:
    python tools/analysis_tools/browse_dataset.py \
        configs/quickstart/mask_rcnn_lf_tiny_synthetic.py \
        --output-dir outputs/browse --max-images 10
"""
import argparse
import os
import os.path as osp
import sys
from typing import List, Sequence

# Run from a source checkout without installing: the repository root first.
sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

import mmlaplacian  # noqa: E402,F401
from mmdet.registry import DATASETS, VISUALIZERS  # noqa: E402
from mmdet.structures.bbox import BaseBoxes  # noqa: E402
from mmdet.structures.mask import BitmapMasks, PolygonMasks  # noqa: E402
from mmengine.config import DictAction  # noqa: E402
from mmengine.registry import init_default_scope  # noqa: E402

from mmlaplacian.engine import read_config  # noqa: E402


def parse_args(argv: Sequence[str] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Draw the ground truth of a dataset')
    parser.add_argument('config', help='config file')
    parser.add_argument(
        '--split', choices=['train', 'val', 'test'], default='train',
        help='which dataloader of the config to browse')
    parser.add_argument(
        '--output-dir', default='outputs/browse',
        help='where to save the images')
    parser.add_argument(
        '--max-images', type=int, default=20,
        help='at most this many images (0: all)')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='override config settings: key=value pairs')
    args = parser.parse_args(argv)
    if not osp.isfile(args.config):
        parser.error(f'config file not found: {args.config}')
    return args


def to_drawable(gt_instances):
    """Plain tensors/arrays the visualizer can draw."""
    boxes = gt_instances.get('bboxes')
    if isinstance(boxes, BaseBoxes):
        gt_instances.bboxes = boxes.tensor
    masks = gt_instances.get('masks')
    if isinstance(masks, (BitmapMasks, PolygonMasks)):
        gt_instances.masks = masks.to_ndarray().astype(bool)
    return gt_instances


def main(argv: Sequence[str] = None) -> List[str]:
    """Draw the images; returns the written paths."""
    args = parse_args(argv)
    cfg = read_config(args.config, args.cfg_options)
    init_default_scope(cfg.get('default_scope', 'mmdet'))

    dataset = DATASETS.build(cfg[f'{args.split}_dataloader'].dataset)
    visualizer = VISUALIZERS.build(cfg.visualizer)
    visualizer.dataset_meta = dataset.metainfo
    os.makedirs(args.output_dir, exist_ok=True)

    count = len(dataset) if args.max_images <= 0 else min(
        args.max_images, len(dataset))
    written = []
    for index in range(count):
        item = dataset[index]
        inputs, sample = item['inputs'], item['data_samples']
        image = inputs.permute(1, 2, 0).numpy()[..., ::-1]  # BGR -> RGB
        sample = sample.numpy()
        sample.gt_instances = to_drawable(sample.gt_instances)
        out_file = osp.join(args.output_dir,
                            osp.basename(sample.img_path))
        visualizer.add_datasample(
            osp.basename(sample.img_path),
            image,
            sample,
            draw_pred=False,
            show=False,
            out_file=out_file)
        written.append(out_file)
    print(f'{len(written)} images with ground truth -> {args.output_dir}')
    return written


if __name__ == '__main__':
    main()
