"""Run a detector on images and save them with the predictions drawn.

Examples:
    python tools/demo/image_demo.py demo.jpg \
        configs/mask_rcnn/lf_tiny_1x.py work_dirs/lf_tiny_1x/epoch_12.pth
    python tools/demo/image_demo.py data/coco/val2017 CONFIG CKPT \
        --out-dir outputs/vis --score-thr 0.5 --max-images 20

Each input ``NAME.ext`` gives ``<out-dir>/NAME.jpg`` with boxes, class
names, scores and (for instance segmentation models) masks.
"""
import argparse
import os
import os.path as osp
import sys
from typing import List, Sequence

# Run from a source checkout without installing: the repository root first.
sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

import mmcv  # noqa: E402
import mmlaplacian  # noqa: E402,F401
from mmdet.apis import inference_detector, init_detector  # noqa: E402
from mmdet.visualization import DetLocalVisualizer  # noqa: E402

IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.bmp', '.tif', '.tiff',
                    '.webp')


def list_images(source: str, max_images: int = 0) -> List[str]:
    """Image files of ``source`` (a file or a folder), sorted."""
    if osp.isfile(source):
        return [source]
    if not osp.isdir(source):
        raise FileNotFoundError(f'no image file or folder at {source}')
    images = sorted(
        osp.join(source, name) for name in os.listdir(source)
        if name.lower().endswith(IMAGE_EXTENSIONS))
    if not images:
        raise FileNotFoundError(f'no images ({", ".join(IMAGE_EXTENSIONS)})'
                                f' in {source}')
    return images[:max_images] if max_images > 0 else images


def parse_args(argv: Sequence[str] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Detect objects in images and draw the predictions')
    parser.add_argument('inputs', help='an image file or a folder of images')
    parser.add_argument('config', help='model config file')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument(
        '--out-dir', default='outputs/demo', help='where to save the images')
    parser.add_argument(
        '--device', default='cpu', help='device, e.g. cpu or cuda:0')
    parser.add_argument(
        '--score-thr', type=float, default=0.3,
        help='draw predictions scoring at least this')
    parser.add_argument(
        '--max-images', type=int, default=0,
        help='at most this many images of a folder (0: all)')
    args = parser.parse_args(argv)
    for path, what in ((args.config, 'config'),
                       (args.checkpoint, 'checkpoint')):
        if not osp.isfile(path):
            parser.error(f'{what} file not found: {path}')
    return args


def main(argv: Sequence[str] = None) -> List[str]:
    """Run the demo; returns the paths of the written images."""
    args = parse_args(argv)
    images = list_images(args.inputs, args.max_images)
    model = init_detector(args.config, args.checkpoint, device=args.device)
    visualizer = DetLocalVisualizer(name='image_demo')
    visualizer.dataset_meta = model.dataset_meta
    os.makedirs(args.out_dir, exist_ok=True)
    written = []
    for path in images:
        result = inference_detector(model, path)
        image = mmcv.imread(path, channel_order='rgb')
        out_file = osp.join(args.out_dir,
                            osp.splitext(osp.basename(path))[0] + '.jpg')
        visualizer.add_datasample(
            osp.basename(path),
            image,
            data_sample=result,
            draw_gt=False,
            show=False,
            pred_score_thr=args.score_thr,
            out_file=out_file)
        kept = int((result.pred_instances.scores >= args.score_thr).sum())
        print(f'{path}: {kept} detections >= {args.score_thr} -> {out_file}')
        written.append(out_file)
    return written


if __name__ == '__main__':
    main()
