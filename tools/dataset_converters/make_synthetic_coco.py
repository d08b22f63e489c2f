"""Write the synthetic-shapes instance-segmentation dataset in COCO format.

Example:
    python tools/dataset_converters/make_synthetic_coco.py \
        --out data/synthetic_coco --train 200 --val 50 --size 256 --seed 0

Layout written::

    <out>/annotations/instances_train.json
    <out>/annotations/instances_val.json
    <out>/train/000000.jpg ...
    <out>/val/000000.jpg ...
"""
import argparse
import json
import sys

from mmlaplacian.synthetic_data.instances import SHAPE_CLASSES, make_synthetic_coco


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Generate a deterministic synthetic COCO dataset of '
        f'shapes ({", ".join(SHAPE_CLASSES)}).')
    parser.add_argument(
        '--out', default='data/synthetic_coco', help='output folder')
    parser.add_argument(
        '--train', type=int, default=200, help='number of training images')
    parser.add_argument(
        '--val', type=int, default=50, help='number of validation images')
    parser.add_argument(
        '--size', type=int, default=256, help='image side in pixels')
    parser.add_argument('--seed', type=int, default=0, help='random seed')
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.train < 0 or args.val < 0:
        sys.exit('--train and --val must be >= 0')
    ann_files = make_synthetic_coco(
        args.out,
        num_train=args.train,
        num_val=args.val,
        image_size=args.size,
        seed=args.seed)
    for split, ann_file in ann_files.items():
        with open(ann_file, encoding='utf-8') as f:
            coco = json.load(f)
        print(f'{split}: {len(coco["images"])} images, '
              f'{len(coco["annotations"])} instances -> {ann_file}')


if __name__ == '__main__':
    main()
