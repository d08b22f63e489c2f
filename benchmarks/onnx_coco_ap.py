"""COCO AP of an exported detector in onnxruntime against PyTorch eager, on
the config's test set, with per-image agreement of the detections.

Both runtimes see the same test-pipeline images; the ONNX graph gets them
padded to a multiple of 32 with the mean pixel (what mmdet's data
preprocessor pads with, after normalisation). Boxes are scaled back and
masks pasted at the original image size, then both go through the config's
evaluator (pycocotools COCO AP).

Example:
    python -m benchmarks.onnx_coco_ap \
        configs/quickstart/mask_rcnn_lf_tiny_synthetic.py CKPT model.onnx
"""
import argparse
import os.path as osp
import sys
from typing import Sequence

import torch
import torch.nn.functional as F
from mmengine.config import DictAction

from mmlaplacian.deployment import (Detections, load_detector, ort_run,
                                    ort_session, paste_masks)
from mmlaplacian.engine import read_config

from benchmarks.onnx_compare import DetectionComparison, compare_detections


def parse_args(argv: Sequence[str] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='COCO AP of an ONNX detector against PyTorch eager')
    parser.add_argument('config', help='mmdet config file')
    parser.add_argument('checkpoint',
                        nargs='?',
                        help='checkpoint the ONNX file was exported from')
    parser.add_argument('onnx', help='exported detector (.onnx)')
    parser.add_argument('--max-images',
                        type=int,
                        default=0,
                        help='evaluate the first N images only (0: all)')
    parser.add_argument('--cfg-options',
                        nargs='+',
                        action=DictAction,
                        help='override config settings: key=value pairs')
    args = parser.parse_args(argv)
    for path in (args.config, args.onnx):
        if not osp.isfile(path):
            parser.error(f'file not found: {path}')
    return args


def pad_image(image: torch.Tensor, divisor: int,
              fill: torch.Tensor) -> torch.Tensor:
    """``(3, h, w)`` -> ``(1, 3, H, W)`` float, H and W rounded up to
    ``divisor``, padded bottom-right with ``fill`` per channel."""
    height, width = image.shape[-2:]
    pad_h, pad_w = (-height) % divisor, (-width) % divisor
    out = F.pad(image[None].float(), (0, pad_w, 0, pad_h))
    if pad_h or pad_w:
        valid = torch.zeros_like(out[:, :1], dtype=torch.bool)
        valid[..., :height, :width] = True
        out = torch.where(valid, out, fill.view(1, 3, 1, 1))
    return out


def ort_sample(outputs, names, sample, mask_thr: float):
    """A DetDataSample of the ONNX outputs, in original-image pixels."""
    from mmengine.structures import InstanceData
    named = dict(zip(names, outputs))
    count = int(named['num_dets'])
    boxes = torch.from_numpy(named['boxes'][:count]).clone()
    scale_w, scale_h = sample.metainfo['scale_factor']
    boxes /= boxes.new_tensor([scale_w, scale_h, scale_w, scale_h])
    result = sample.clone()
    pred = InstanceData(bboxes=boxes,
                        scores=torch.from_numpy(named['scores'][:count]),
                        labels=torch.from_numpy(named['labels'][:count]))
    if 'masks' in named:
        pred.masks = torch.from_numpy(
            paste_masks(named['masks'][:count], boxes.numpy(),
                        sample.metainfo['ori_shape'], mask_thr))
    result.pred_instances = pred
    return result


def main(argv: Sequence[str] = None) -> int:
    from mmengine.evaluator import Evaluator
    from mmengine.runner import Runner

    args = parse_args(argv)
    cfg = read_config(args.config, args.cfg_options)
    model = load_detector(cfg, args.checkpoint)
    loader = Runner.build_dataloader(cfg.test_dataloader)
    evaluators = {
        name: Evaluator(cfg.test_evaluator)
        for name in ('PyTorch eager', 'onnxruntime')
    }
    for evaluator in evaluators.values():
        evaluator.dataset_meta = loader.dataset.metainfo
    session = ort_session(args.onnx)
    names = [o.name for o in session.get_outputs()]
    preprocessor = model.data_preprocessor
    divisor = getattr(preprocessor, 'pad_size_divisor', 1) or 1
    # The normalised pad value 0 is the mean pixel, in the loaded order.
    fill = preprocessor.mean.view(3)
    if getattr(preprocessor, '_channel_conversion', False):
        fill = fill.flip(0)
    mask_thr = cfg.model.test_cfg.get('rcnn', {}).get('mask_thr_binary', 0.5)
    agreement, seen = DetectionComparison(), 0
    for batch in loader:
        with torch.no_grad():
            eager = model.test_step(batch)
        ort = []
        for image, sample, ref in zip(batch['inputs'], batch['data_samples'],
                                      eager):
            outputs = ort_run(session, pad_image(image, divisor, fill))
            ort.append(ort_sample(outputs, names, sample, mask_thr))
            agreement = agreement.merge(
                compare_detections(
                    Detections.from_instances(ort[-1].pred_instances),
                    Detections.from_instances(ref.pred_instances)))
        evaluators['PyTorch eager'].process(eager, batch)
        evaluators['onnxruntime'].process(ort, batch)
        seen += len(eager)
        if args.max_images and seen >= args.max_images:
            break
    metrics = {
        name: evaluator.evaluate(seen)
        for name, evaluator in evaluators.items()
    }
    print(f'\n-- {seen} images, detections of onnxruntime against PyTorch')
    for line in agreement.lines():
        print('   ' + line)
    print('\n-- COCO AP (pycocotools)')
    keys = [
        k for k in metrics['PyTorch eager'] if k.endswith(('_mAP', '_mAP_50'))
    ]
    print(f'   {"metric":16s} {"PyTorch":>9s} {"ORT":>9s}')
    for key in keys:
        print(f'   {key:16s} {metrics["PyTorch eager"][key]:9.4f} '
              f'{metrics["onnxruntime"][key]:9.4f}')
    return 0 if agreement.ok else 1


if __name__ == '__main__':
    sys.exit(main())
