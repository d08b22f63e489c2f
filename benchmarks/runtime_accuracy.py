"""Accuracy of a trained detector or segmentor in every runtime we export to.

The config's test set is run through PyTorch eager (mmdet's / mmseg's own
``test_step``), ExecuTorch (XNNPACK) fp32 and int8 (and the same with our
ExecuTorch kernel for the Laplacian kernel, ``executorch-operator-*``; they
are skipped where it is not built), and onnxruntime fp32 and int8, and each
runtime's predictions go through the config's own evaluator: pycocotools
box and mask AP for a detector, mmseg's mIoU for a segmentor.
The int8 programs are calibrated on the training images
(``--calibration-images``, default the config's training folder). The table
gives each runtime's metrics, the change against PyTorch and whether it is
within the bounds we hold the exports to (fp32: 0.005 AP, 0.2 mIoU; int8:
0.02 box AP, 2 mIoU).

Example (the quick starts, trained by ``make demo`` / ``make demo-seg``):
    python -m benchmarks.runtime_accuracy \\
        configs/quickstart/mask_rcnn_lf_tiny_synthetic.py \\
        work_dirs/quickstart/epoch_8.pth --out-dir work_dirs/runtime_accuracy
    python -m benchmarks.runtime_accuracy \\
        configs/quickstart/sem_fpn_lf_tiny_synthetic_seg.py \\
        work_dirs/quickstart_seg/iter_900.pth --out-dir work_dirs/runtime_accuracy
"""
from __future__ import annotations

import argparse
import json
import os
import os.path as osp
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from mmengine.config import DictAction

from benchmarks.runtime_speed import laplace_form, program_suffix
from benchmarks.tables import markdown_table
from mmlaplacian.deployment.loading import is_segmentor_config, load_model

RUNTIMES = ('pytorch', 'executorch-fp32', 'executorch-int8',
            'onnxruntime-fp32', 'onnxruntime-int8', 'executorch-operator-fp32',
            'executorch-operator-int8')
# The largest change against PyTorch each runtime may show, by metric kind.
BOUNDS = {
    'fp32': {'bbox_mAP': 0.005, 'segm_mAP': 0.005, 'mIoU': 0.2},
    'int8': {'bbox_mAP': 0.02, 'mIoU': 2.0},
}
DETECTION_METRICS = ('bbox_mAP', 'bbox_mAP_50', 'segm_mAP', 'segm_mAP_50')
SEGMENTATION_METRICS = ('mIoU', 'aAcc')
Predictor = Callable[[dict], List]


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n')[0])
    parser.add_argument('config', help='an mmdet detector or mmseg '
                        'segmentor config')
    parser.add_argument('checkpoint', help='its trained weights')
    parser.add_argument('--runtimes', nargs='+', choices=RUNTIMES,
                        default=list(RUNTIMES))
    parser.add_argument('--out-dir', default='work_dirs/runtime_accuracy',
                        help='where the programs and results go')
    parser.add_argument('--calibration-images', help='image folder for the '
                        'int8 calibration (default: the config\'s training '
                        'images)')
    parser.add_argument('--calibration-count', type=int, default=32)
    parser.add_argument('--max-images', type=int, default=0,
                        help='evaluate the first N test images (0: all)')
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    args = parser.parse_args(argv)
    for path in (args.config, args.checkpoint):
        if not osp.isfile(path):
            parser.error(f'file not found: {path}')
    return args


def test_shape(loader) -> tuple:
    """The programs' static input size: the largest test image after the
    pipeline, rounded up to 32."""
    first = next(iter(loader))['inputs'][0]
    return tuple(-(-int(s) // 32) * 32 for s in first.shape[-2:])


class SegmentationProgram:
    """An exported ``image -> logits`` segmentor as a ``test_step``."""

    def __init__(self, run: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.run = run

    def test_step(self, batch: dict) -> List:
        from mmengine.structures import PixelData
        samples = []
        for image, sample in zip(batch['inputs'], batch['data_samples']):
            logits = self.run(image[None].float())
            height, width = sample.metainfo['ori_shape']
            labels = logits[0, :, :height, :width].argmax(0)
            result = sample.clone()
            result.pred_sem_seg = PixelData(data=labels[None])
            samples.append(result)
        return samples


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

    from mmlaplacian.deployment import paste_masks
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


class OnnxDetector:
    """An exported detector graph in onnxruntime as a ``test_step``."""

    def __init__(self, path: str, model, cfg, threads: int) -> None:
        from mmlaplacian.deployment import ort_session
        self.session = ort_session(path, threads)
        self.names = [o.name for o in self.session.get_outputs()]
        preprocessor = model.data_preprocessor
        self.divisor = getattr(preprocessor, 'pad_size_divisor', 1) or 1
        # The normalised pad value 0 is the mean pixel, in the loaded order.
        fill = preprocessor.mean.view(3)
        if getattr(preprocessor, '_channel_conversion', False):
            fill = fill.flip(0)
        self.fill = fill
        self.mask_thr = cfg.model.test_cfg.get('rcnn', {}).get(
            'mask_thr_binary', 0.5)

    def test_step(self, batch: dict) -> List:
        from mmlaplacian.deployment import ort_run
        return [
            ort_sample(
                ort_run(self.session, pad_image(image, self.divisor,
                                                self.fill)), self.names,
                sample, self.mask_thr)
            for image, sample in zip(batch['inputs'], batch['data_samples'])
        ]


def export_module(model, cfg):
    """The module an ONNX export takes: the detector with its
    postprocessing, or the segmentor as ``image -> logits``."""
    from mmlaplacian.deployment import (SegmentorForExport,
                                        build_exportable_detector)
    if is_segmentor_config(cfg):
        return SegmentorForExport(model).eval()
    return build_exportable_detector(model).eval()


def kernels_available() -> bool:
    """Whether our ExecuTorch kernel loads here (the operator runtimes
    need it); says why not."""
    from mmlaplacian.deployment.executorch_kernels import \
        load_executorch_kernels
    try:
        load_executorch_kernels()
        return True
    except ImportError as err:
        print(f'   skipped: {err}', flush=True)
        return False


def build_predictors(args, cfg, model, shape, calibration) -> Dict:
    """One ``test_step`` per runtime; the exports are made here, timed."""
    from mmlaplacian.deployment import export_onnx, graph_input
    from mmlaplacian.deployment.executorch_export import (export_executorch,
                                                          run_executorch)
    os.makedirs(args.out_dir, exist_ok=True)
    stem = osp.join(args.out_dir,
                    osp.splitext(osp.basename(args.config))[0])
    segmentor = is_segmentor_config(cfg)
    predictors: Dict[str, object] = {}
    seconds: Dict[str, float] = {}
    onnx_exported = False
    for runtime in args.runtimes:
        start = time.perf_counter()
        precision = runtime.split('-')[-1]
        quantize = 'int8' if precision == 'int8' else None
        print(f'-- {runtime}: exporting', flush=True)
        if runtime == 'pytorch':
            predictors[runtime] = model
        elif runtime.startswith('executorch'):
            laplace = laplace_form(runtime)
            if laplace == 'operator' and not kernels_available():
                continue
            path = f'{stem}.{program_suffix(runtime)}.pte'
            if segmentor:
                export_executorch(export_module(model, cfg),
                                  graph_input(shape, detector=True), path,
                                  laplace=laplace, quantize=quantize,
                                  calibration=calibration if quantize else
                                  None)
                predictors[runtime] = SegmentationProgram(
                    lambda image, path=path: run_executorch(path, [image])[0])
            else:
                from mmlaplacian.deployment.executorch_detectors import \
                    export_detector_executorch
                from mmlaplacian.deployment.executorch_runner import \
                    ExecuTorchDetector
                programs = export_detector_executorch(
                    model, shape, path, quantize=quantize,
                    calibration=calibration if quantize else None,
                    laplace=laplace)
                predictors[runtime] = ExecuTorchDetector(cfg, **programs.paths)
        else:
            fp32 = f'{stem}.fp32.onnx'
            if not onnx_exported:  # once a run: int8 quantizes this file
                module = export_module(model, cfg)
                export_onnx(module, graph_input(shape, detector=True), fp32,
                            output_names=list(module.output_names))
                onnx_exported = True
            path = fp32
            if quantize:
                from mmlaplacian.deployment.onnx_quantization import \
                    quantize_onnx
                path = f'{stem}.int8.onnx'
                quantize_onnx(fp32, path, calibration)
            if segmentor:
                from mmlaplacian.deployment import ort_run, ort_session
                session = ort_session(path, args.threads)
                predictors[runtime] = SegmentationProgram(
                    lambda image, s=session: torch.from_numpy(
                        ort_run(s, image)[0]))
            else:
                predictors[runtime] = OnnxDetector(path, model, cfg,
                                                   args.threads)
        seconds[runtime] = time.perf_counter() - start
        print(f'   ready in {seconds[runtime]:.0f} s', flush=True)
    return predictors, seconds


def agreement(results: List, reference: List, state):
    """Per-image agreement of a runtime's predictions with PyTorch's:
    matched detections (``benchmarks.onnx_compare``), or the share of
    pixels with the same label (``state`` is ``[same, total]``)."""
    if hasattr(reference[0], 'pred_sem_seg'):
        state = state or [0, 0]
        for got, ref in zip(results, reference):
            same = got.pred_sem_seg.data == ref.pred_sem_seg.data
            state = [state[0] + int(same.sum()), state[1] + same.numel()]
        return state
    from benchmarks.onnx_compare import DetectionComparison, compare_detections
    from mmlaplacian.deployment import Detections
    state = state or DetectionComparison()
    for got, ref in zip(results, reference):
        state = state.merge(
            compare_detections(Detections.from_instances(got.pred_instances),
                               Detections.from_instances(ref.pred_instances)))
    return state


def evaluate(cfg, loader, predictors: Dict, max_images: int) -> tuple:
    """Each runtime's metrics from the config's evaluator on the same
    batches, and its agreement with PyTorch image by image."""
    from mmengine.evaluator import Evaluator
    evaluators = {name: Evaluator(cfg.test_evaluator) for name in predictors}
    agreements: Dict[str, object] = {}
    for evaluator in evaluators.values():
        evaluator.dataset_meta = loader.dataset.metainfo
    seen, total = 0, len(loader.dataset)
    if max_images:
        total = min(total, max_images)
    for batch in loader:
        reference = None
        for name, predictor in predictors.items():
            with torch.no_grad():
                results = predictor.test_step(batch)
            if name == 'pytorch':
                reference = results
            elif reference is not None:
                agreements[name] = agreement(results, reference,
                                             agreements.get(name))
            evaluators[name].process(results, batch)
        seen += len(batch['inputs'])
        print(f'\r   {seen}/{total} images', end='', flush=True)
        if max_images and seen >= max_images:
            break
    print()
    return {
        name: evaluator.evaluate(seen)
        for name, evaluator in evaluators.items()
    }, agreements


def metric_value(metrics: Dict, key: str) -> Optional[float]:
    for name, value in metrics.items():
        if name.split('/')[-1] == key:
            return float(value)
    return None


def table_rows(metrics: Dict, keys: Sequence[str], seconds: Dict) -> List:
    reference = metrics.get('pytorch', {})
    rows = []
    for runtime, values in metrics.items():
        row = [runtime]
        verdicts = []
        for key in keys:
            value = metric_value(values, key)
            base = metric_value(reference, key)
            if value is None:
                row.append('')
                continue
            delta = value - base if base is not None else None
            row.append(f'{value:.3f}' if delta is None or runtime == 'pytorch'
                       else f'{value:.3f} ({delta:+.3f})')
            bound = BOUNDS.get(runtime.split('-')[-1], {}).get(key)
            if bound is not None and delta is not None:
                # fp32 must match both ways; int8 may only lose so much.
                worst = abs(delta) if runtime.endswith('fp32') else -delta
                verdicts.append(worst <= bound)
        row.append(f'{seconds.get(runtime, 0):.0f}')
        row.append('' if not verdicts else
                   ('within bounds' if all(verdicts) else 'OUT OF BOUNDS'))
        rows.append(row)
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    from mmengine.runner import Runner

    from mmlaplacian.deployment.calibration import (calibration_inputs,
                                                    training_images_folder)
    from mmlaplacian.engine import read_config

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = read_config(args.config, args.cfg_options)
    model = load_model(cfg, args.checkpoint)
    loader = Runner.build_dataloader(cfg.test_dataloader)
    shape = test_shape(loader)
    calibration = None
    if any(r.endswith('int8') for r in args.runtimes):
        folder = args.calibration_images or training_images_folder(cfg)
        calibration = calibration_inputs(folder, shape,
                                         args.calibration_count)
        print(f'calibration: {len(calibration)} images from {folder}')
    predictors, seconds = build_predictors(args, cfg, model, shape,
                                           calibration)
    metrics, agreements = evaluate(cfg, loader, predictors, args.max_images)
    for name, state in agreements.items():
        print(f'-- {name} against PyTorch, image by image')
        if isinstance(state, list):
            print(f'   same label at {100 * state[0] / state[1]:.2f}% of the '
                  f'pixels')
        else:
            for line in state.lines():
                print('   ' + line)
    keys = SEGMENTATION_METRICS if is_segmentor_config(cfg) else DETECTION_METRICS
    keys = [k for k in keys if metric_value(metrics['pytorch'] if 'pytorch'
                                            in metrics else next(
                                                iter(metrics.values())),
                                            k) is not None]
    rows = table_rows(metrics, keys, seconds)
    print(markdown_table(['runtime', *keys, 'export s', 'verdict'], rows))
    with open(osp.join(args.out_dir, osp.splitext(osp.basename(
            args.config))[0] + '.json'), 'w') as f:
        json.dump({'shape': shape, 'metrics': metrics, 'export_seconds':
                   seconds}, f, indent=1, default=float)
    return 0 if all(row[-1] != 'OUT OF BOUNDS' for row in rows) else 1


if __name__ == '__main__':
    sys.exit(main())
