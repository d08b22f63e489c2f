"""Evaluate a trained model with the config's evaluator: COCO AP for the
detectors, mIoU / mAcc / aAcc (mmseg's IoUMetric) for the segmentors.

Examples:
    python tools/test.py configs/mask_rcnn/lf_tiny_1x.py \
        work_dirs/lf_tiny_1x/epoch_12.pth
    python tools/test.py CONFIG CKPT --out results.pkl --show-dir vis
    python tools/test.py CONFIG CKPT --amp --compile
    bash tools/dist_test.sh CONFIG CKPT 8
"""
import argparse
import os
import os.path as osp
import warnings
from copy import deepcopy

import mmlaplacian  # noqa: F401
from mmdet.engine.hooks.utils import trigger_visualization_hook
from mmdet.evaluation import DumpDetResults
from mmengine.config import Config, ConfigDict, DictAction
from mmengine.evaluator import DumpResults
from mmengine.logging import print_log

from mmlaplacian.engine import (build_runner, compile_parts,
                                configure_test_amp, load_config,
                                run_in_bfloat16, shutdown_distributed)
from mmlaplacian.engine.missing_inputs import (
    check_test_inputs, main_without_traceback)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Test (and evaluate) a detector')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument(
        '--work-dir', help='the directory to save the evaluation metrics')
    parser.add_argument(
        '--out', help='dump predictions to a pickle file (.pkl)')
    parser.add_argument(
        '--show', action='store_true', help='show the predictions')
    parser.add_argument(
        '--show-dir',
        help='save the painted predictions to work_dir/<timestamp>/<this>')
    parser.add_argument(
        '--wait-time', type=float, default=2, help='seconds per shown image')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override config settings: key=value pairs, e.g. '
        'test_dataloader.batch_size=4 or key="[a,b]" for lists (no spaces)')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none',
        help='job launcher')
    parser.add_argument(
        '--tta', action='store_true', help='test-time augmentation (flip)')
    parser.add_argument(
        '--amp',
        action='store_true',
        help='mixed precision: the backbone and neck in bfloat16 on a CPU '
        '(fast with AMX or AVX512-BF16), the whole model in float16 on a GPU')
    parser.add_argument(
        '--compile',
        action='store_true',
        help='compile the backbone and neck with torch.compile (inductor, '
        'weights frozen); the first batch of each input size compiles them')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if not osp.isfile(args.config):
        parser.error(f'config file not found: {args.config}')
    if not osp.isfile(args.checkpoint) and '://' not in args.checkpoint:
        parser.error(f'checkpoint file not found: {args.checkpoint}')
    if args.out is not None and not args.out.endswith(('.pkl', '.pickle')):
        parser.error(f'--out must be a .pkl or .pickle file, got {args.out}')
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def apply_tta(cfg: Config) -> None:
    """Wrap the model in ``DetTTAModel`` with flip augmentation."""
    if 'tta_model' not in cfg:
        warnings.warn('no tta_model in the config: using DetTTAModel with '
                      'NMS at IoU 0.5')
        cfg.tta_model = dict(
            type='DetTTAModel',
            tta_cfg=dict(
                nms=dict(type='nms', iou_threshold=0.5), max_per_img=100))
    if 'tta_pipeline' not in cfg:
        warnings.warn('no tta_pipeline in the config: flipping the test '
                      'pipeline')
        test_data_cfg = cfg.test_dataloader.dataset
        while 'dataset' in test_data_cfg:
            test_data_cfg = test_data_cfg['dataset']
        cfg.tta_pipeline = deepcopy(test_data_cfg.pipeline)
        cfg.tta_pipeline[-1] = dict(
            type='TestTimeAug',
            transforms=[[
                dict(type='RandomFlip', prob=1.),
                dict(type='RandomFlip', prob=0.)
            ],
                        [
                            dict(
                                type='PackDetInputs',
                                meta_keys=('img_id', 'img_path', 'ori_shape',
                                           'img_shape', 'scale_factor',
                                           'flip', 'flip_direction'))
                        ]])
    cfg.model = ConfigDict(**cfg.tta_model, module=cfg.model)
    cfg.test_dataloader.dataset.pipeline = cfg.tta_pipeline


def is_segmentation(cfg: Config) -> bool:
    """Whether the config runs in mmseg's scope."""
    return cfg.get('default_scope') == 'mmseg'


def trigger_seg_visualization_hook(cfg: Config,
                                   args: argparse.Namespace) -> None:
    """mmseg's ``SegVisualizationHook`` draws (and shows or saves) every
    prediction beside its ground truth, as mmdet's hook does for detectors;
    saved pictures go to ``<show_dir>/vis_data/vis_image/`` (a relative
    ``show_dir`` is taken in the work directory)."""
    hook = cfg.default_hooks.get('visualization')
    if hook is None:
        raise RuntimeError(
            f'--show/--show-dir: {args.config} has no '
            'default_hooks.visualization (SegVisualizationHook)')
    hook['draw'] = True
    hook['interval'] = 1
    if args.show:
        hook['show'] = True
        hook['wait_time'] = args.wait_time
    if args.show_dir:
        cfg.visualizer['save_dir'] = osp.join(cfg.work_dir, args.show_dir)


def build_config(args: argparse.Namespace) -> Config:
    """The config with the command-line settings applied."""
    cfg = load_config(args.config, args.launcher, args.cfg_options,
                      args.work_dir)
    cfg.load_from = args.checkpoint
    if (args.show or args.show_dir) and is_segmentation(cfg):
        trigger_seg_visualization_hook(cfg, args)
    elif args.show or args.show_dir:
        cfg = trigger_visualization_hook(cfg, args)
    if args.tta:
        apply_tta(cfg)
    return cfg


def main(argv=None) -> None:
    args = parse_args(argv)
    cfg = build_config(args)
    check_test_inputs(cfg)  # before any model is built
    cpu_amp = args.amp and configure_test_amp(cfg)
    runner = build_runner(cfg)
    if cpu_amp:
        parts = run_in_bfloat16(runner.model)
        print_log(f'--amp: {", ".join(parts)} in bfloat16', logger='current')
    if args.compile:
        # Evaluation never changes the weights: freeze them into the code.
        parts = compile_parts(runner.model, freezing=True)
        print_log(f'--compile: {", ".join(parts)} compiled by inductor',
                  logger='current')
    if args.out is not None:
        dump = DumpResults if is_segmentation(runner.cfg) else DumpDetResults
        runner.test_evaluator.metrics.append(dump(out_file_path=args.out))
    runner.test()
    shutdown_distributed()


if __name__ == '__main__':
    main_without_traceback(main, 'test.py')
