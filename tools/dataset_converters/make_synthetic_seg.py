"""Write the synthetic-shapes scenes as a semantic-segmentation dataset.

Example:
    python tools/dataset_converters/make_synthetic_seg.py \
        --out data/synthetic_seg --train 200 --val 50 --size 96 \
        --radius 0.15 0.3 --seed 0

Layout written (MMSegmentation's ``img_dir``/``ann_dir`` convention)::

    <out>/img_dir/train/000000.jpg ...   <out>/ann_dir/train/000000.png ...
    <out>/img_dir/val/000000.jpg ...     <out>/ann_dir/val/000000.png ...
    <out>/meta.json

Label maps: 0 background, 1 circle, 2 square, 3 triangle, 4 star, 255 the
ignored shape outlines. ``--radius MIN MAX`` sets the shapes' circumradius
as shares of the image side (the detection dataset's 0.09 0.2 by default).
With ``--skip-if-complete`` an existing dataset of the same size, seed,
radius range and image counts is kept.
"""
import argparse
import sys

from mmlaplacian.synthetic_data.label_maps import SEG_CLASSES, is_complete_seg, make_synthetic_seg
from mmlaplacian.synthetic_data.instances import RADIUS_RANGE


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Generate the deterministic synthetic shapes scenes as '
        f'semantic label maps ({", ".join(SEG_CLASSES)}).')
    parser.add_argument(
        '--out', default='data/synthetic_seg', help='output folder')
    parser.add_argument(
        '--train', type=int, default=200, help='number of training images')
    parser.add_argument(
        '--val', type=int, default=50, help='number of validation images')
    parser.add_argument(
        '--size', type=int, default=256, help='image side in pixels')
    parser.add_argument('--seed', type=int, default=0, help='random seed')
    parser.add_argument(
        '--radius',
        type=float,
        nargs=2,
        default=list(RADIUS_RANGE),
        metavar=('MIN', 'MAX'),
        help='shape circumradius range as shares of the image side')
    parser.add_argument(
        '--ignore-border',
        type=int,
        default=1,
        help='width in pixels of the ignored (255) outline of each shape')
    parser.add_argument(
        '--skip-if-complete',
        action='store_true',
        help='keep a complete dataset made with these options at --out')
    args = parser.parse_args(argv)
    if args.train < 0 or args.val < 0:
        parser.error('--train and --val must be >= 0')
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.skip_if_complete and is_complete_seg(
            args.out, args.size, args.seed, args.radius, args.train,
            args.val):
        print(f'found the dataset at {args.out} ({args.size} px, seed '
              f'{args.seed}, radius {args.radius[0]:g}-{args.radius[1]:g}): '
              'not generating it again')
        return
    try:
        meta = make_synthetic_seg(
            args.out,
            num_train=args.train,
            num_val=args.val,
            image_size=args.size,
            seed=args.seed,
            ignore_border=args.ignore_border,
            radius_range=args.radius)
    except ValueError as err:
        sys.exit(f'error: {err}')
    for split, count in meta['counts'].items():
        print(f'{split}: {count} images -> {args.out}/img_dir/{split}, '
              f'label maps -> {args.out}/ann_dir/{split}')


if __name__ == '__main__':
    main()
