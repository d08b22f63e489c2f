"""Train a detector with a LaplacianFormer backbone (mmdet 3.x runner).

Examples:
    python tools/train.py configs/mask_rcnn/lf_tiny_1x.py
    python tools/train.py configs/mask_rcnn/lf_tiny_1x.py --amp --resume
    bash tools/dist_train.sh configs/mask_rcnn/lf_tiny_1x.py 8

Without a GPU, ``--launcher pytorch`` uses gloo and ``--amp`` uses bfloat16
autocast (see ``mmlaplacian/engine/``).
"""
import argparse
import os
import os.path as osp

# Importing the package registers the backbone and lets mmengine load full
# checkpoints (--resume, load_from) under torch >= 2.6.
import mmlaplacian  # noqa: F401
from mmengine.config import Config, DictAction
from mmengine.logging import print_log

from mmlaplacian.engine import (build_runner, enable_amp,
                                load_config, shutdown_distributed)
from mmlaplacian.engine.missing_inputs import (
    check_train_inputs, main_without_traceback)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Train a detector')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument(
        '--amp',
        action='store_true',
        default=False,
        help='enable automatic-mixed-precision training (bfloat16 on CPU)')
    parser.add_argument(
        '--auto-scale-lr',
        action='store_true',
        help='scale the learning rate by the actual total batch size')
    parser.add_argument(
        '--resume',
        nargs='?',
        type=str,
        const='auto',
        help='resume from this checkpoint; without a path, from the latest '
        'checkpoint in the work directory')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override config settings: key=value pairs, e.g. '
        'train_cfg.max_epochs=24 or key="[a,b]" for lists (no spaces)')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none',
        help='job launcher')
    # torchrun passes --local-rank (torch >= 2.0); older launchers
    # --local_rank.
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if not osp.isfile(args.config):
        parser.error(f'config file not found: {args.config}')
    if (args.resume not in (None, 'auto') and not osp.isfile(args.resume)
            and '://' not in args.resume):
        parser.error(f'--resume: checkpoint file not found: {args.resume}')
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def build_config(args: argparse.Namespace) -> Config:
    """The config with the command-line settings applied."""
    cfg = load_config(args.config, args.launcher, args.cfg_options,
                      args.work_dir)

    if args.amp:
        wrapper = enable_amp(cfg)
        print_log(f'--amp: optimizer wrapper {wrapper}', logger='current')

    if args.auto_scale_lr:
        scale_cfg = cfg.get('auto_scale_lr', {})
        if 'enable' not in scale_cfg or 'base_batch_size' not in scale_cfg:
            raise RuntimeError(
                f'--auto-scale-lr: {args.config} has no auto_scale_lr with '
                '"enable" and "base_batch_size"')
        cfg.auto_scale_lr.enable = True

    # An explicit checkpoint wins over finding the latest one.
    if args.resume == 'auto':
        cfg.resume = True
        cfg.load_from = None
    elif args.resume is not None:  # checked by parse_args
        cfg.resume = True
        cfg.load_from = args.resume
    return cfg


def main(argv=None) -> None:
    args = parse_args(argv)
    cfg = build_config(args)
    # Before any model is built: a missing dataset or ImageNet checkpoint
    # is reported with the way on, not after minutes of set-up.
    check_train_inputs(cfg)
    runner = build_runner(cfg)
    runner.train()
    shutdown_distributed()


if __name__ == '__main__':
    main_without_traceback(main, 'train.py')
