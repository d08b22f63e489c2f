"""mmdet detectors as ExecuTorch programs, with NMS and RoI Align left to
the host.

ExecuTorch has no kernels for NMS or RoI Align, and the box arithmetic
around them is a small share of the time, so only the networks become
programs (lowered to XNNPACK by :func:`~mmlaplacian.deployment.
executorch_export.export_executorch`):

* RetinaNet: one program, ``out``, whose method ``forward`` is the dense
  part (:class:`~mmlaplacian.deployment.detectors.DenseStage`): image
  ``(1, 3, H, W)`` to the head's classification maps of each level, then
  its box maps.
* Faster/Mask R-CNN: two programs. ``<out stem>.dense.pte``, method
  ``forward``: image to the FPN maps the RoI extractors pool from, then
  the RPN's classification and box maps of every level.
  ``<out stem>.roi_heads.pte``: method ``bbox_head`` on the ``K``
  pooled proposals (``K`` = the RPN's ``max_per_img``) and, for Mask R-CNN,
  method ``mask_head`` on the ``D`` pooled detections (``D`` = the R-CNN's
  ``max_per_img``), both with those fixed counts.

:class:`~mmlaplacian.deployment.executorch_runner.ExecuTorchDetector` runs
them, with the same stage functions as the ONNX graph
(:meth:`~mmlaplacian.deployment.detectors.ExportableTwoStageDetector.
detect`) between the programs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from .detectors import ExportableTwoStageDetector, build_exportable_detector
from .executorch_export import (XNNPACK_BLOCK_ELEMENTS, ExecuTorchResult,
                                export_executorch)
from .runtime import graph_input

DENSE_METHOD = 'forward'
BBOX_HEAD_METHOD = 'bbox_head'
MASK_HEAD_METHOD = 'mask_head'
DENSE_SUFFIX = '.dense.pte'
ROI_HEADS_SUFFIX = '.roi_heads.pte'


def program_paths(out: str, two_stage: bool) -> Dict[str, str]:
    """The program files of a detector exported to ``out``.

    Args:
        out (str): The export's output path (``model.pte``).
        two_stage (bool): A two-stage detector (two programs).

    Returns:
        dict[str, str]: ``{'dense': out}`` for a single-stage detector;
        ``{'dense': 'model.dense.pte', 'roi_heads': 'model.roi_heads.pte'}``
        for a two-stage one. The keys are
        :class:`~mmlaplacian.deployment.executorch_runner.
        ExecuTorchDetector`'s arguments.
    """
    if not two_stage:
        return {'dense': out}
    stem = out[:-len('.pte')] if out.endswith('.pte') else out
    return {'dense': stem + DENSE_SUFFIX, 'roi_heads': stem + ROI_HEADS_SUFFIX}


@dataclass
class DetectorPrograms:
    """What :func:`export_detector_executorch` produced.

    Attributes:
        dense (ExecuTorchResult): The dense program.
        roi_heads (ExecuTorchResult, optional): A two-stage detector's RoI
            heads program.
    """
    dense: ExecuTorchResult
    roi_heads: Optional[ExecuTorchResult] = None

    @property
    def paths(self) -> Dict[str, str]:
        """``{'dense': path}`` plus ``'roi_heads'`` for a two-stage
        detector: ``ExecuTorchDetector(config, **programs.paths)``."""
        paths = {'dense': self.dense.path}
        if self.roi_heads is not None:
            paths['roi_heads'] = self.roi_heads.path
        return paths

    @property
    def results(self) -> List[ExecuTorchResult]:
        """Each program's result, dense first."""
        return [r for r in (self.dense, self.roi_heads) if r is not None]

    @property
    def seconds(self) -> float:
        """Export and lowering time over the programs."""
        return sum(r.seconds for r in self.results)


def check_input_shape(detector: nn.Module, shape: Sequence[int]) -> None:
    """A detector program's input size is a multiple of the data
    preprocessor's ``pad_size_divisor`` (the strides of the FPN need it).

    Raises:
        ValueError: It is not; the message gives the next valid size.
    """
    divisor = getattr(detector.data_preprocessor, 'pad_size_divisor', 1) or 1
    if len(shape) != 2 or any(side % divisor for side in shape):
        raise ValueError(
            f'detector program shape {tuple(shape)}: height and width must '
            f'be multiples of the data preprocessor\'s pad_size_divisor '
            f'({divisor}), as mmdet pads them; e.g. '
            f'{tuple(-(-s // divisor) * divisor for s in shape)}')


def _roi_heads(module: ExportableTwoStageDetector) -> Dict[str, nn.Module]:
    """The RoI heads program's methods: ``{method name: head}``."""
    heads = {BBOX_HEAD_METHOD: module.bbox_head}
    if module.with_mask:
        heads[MASK_HEAD_METHOD] = module.mask_head
    return heads


def _roi_head_inputs(module: ExportableTwoStageDetector,
                     images: Sequence[torch.Tensor]) -> Dict[str, List[Tuple]]:
    """The pooled features the RoI heads see on ``images``: the eager
    flow, run with heads that record their inputs."""
    heads = _roi_heads(module)
    recorded: Dict[str, List[Tuple]] = {name: [] for name in heads}

    def recording(name):

        def run(pooled):
            recorded[name].append((pooled, ))
            return heads[name](pooled)

        return run

    with torch.no_grad():
        for image in images:
            module.detect(image, image.shape[-2:], module.dense,
                          recording(BBOX_HEAD_METHOD),
                          recording(MASK_HEAD_METHOD)
                          if module.with_mask else None)
    return recorded


def export_detector_executorch(
        detector: nn.Module,
        shape: Sequence[int],
        out: str,
        quantize: Optional[str] = None,
        calibration: Optional[Sequence[Tuple[torch.Tensor]]] = None,
        laplace: str = 'auto',
        block_elements: int = XNNPACK_BLOCK_ELEMENTS,
        float_parts: Optional[Sequence[str]] = None) -> DetectorPrograms:
    """Write a detector's networks as XNNPACK-lowered ExecuTorch programs.

    Args:
        detector (nn.Module): A built mmdet detector in eval mode
            (:func:`~mmlaplacian.deployment.load_detector`): RetinaNet, or
            Faster/Mask R-CNN with a ``StandardRoIHead``.
        shape (sequence[int]): The programs' input ``(H, W)``, a multiple
            of the data preprocessor's ``pad_size_divisor``. Images up to
            this size run in them (padded at the bottom and right).
        out (str): Output path; the files are :func:`program_paths`.
        quantize (str, optional): None (float32) or ``'int8'`` (PT2E static
            int8 with the XNNPACK quantizer): both programs, the heads'
            convolutions and linear layers included, each FPN level's use
            of a shared head quantized on its own scale.
        calibration (list[tuple[Tensor]], optional): With int8: ``(image,)``
            tuples, ``(1, 3, H, W)`` pixels as the pipeline loads them
            (:func:`~mmlaplacian.deployment.calibration.
            calibration_inputs`). The RoI heads calibrate on the pooled
            features of the same images.
        laplace (str): Graph form of the Laplacian kernel, or
            ``'operator'`` (our ExecuTorch kernels; :func:`~mmlaplacian.
            deployment.executorch_export.export_executorch`).
        block_elements (int): Element budget of one row block of the
            Laplacian kernel (:data:`~mmlaplacian.deployment.
            executorch_export.XNNPACK_BLOCK_ELEMENTS`).
        float_parts (Sequence[str], optional): With int8: the backbone's
            parts left in float32 (``export_executorch``'s
            ``float_parts``).

    Returns:
        DetectorPrograms: The programs' files, times and lowering reports.

    Raises:
        ExportUnsupportedError: The detector has no export path.
        ValueError: A ``shape`` the detector cannot take, or calibration
            images of another size.
    """
    check_input_shape(detector, shape)
    module = build_exportable_detector(detector).eval()
    example = graph_input(shape, detector=True)
    images = [example]
    if calibration is not None:
        images = [args[0] for args in calibration]
        wrong = [tuple(i.shape) for i in images if i.shape != example.shape]
        if wrong:
            raise ValueError(
                f'calibration images of shape {wrong[0]}: the programs take '
                f'{tuple(example.shape)}')
    two_stage = isinstance(module, ExportableTwoStageDetector)
    paths = program_paths(out, two_stage)
    dense = export_executorch(module.dense,
                              example,
                              paths['dense'],
                              laplace=laplace,
                              quantize=quantize,
                              calibration=calibration,
                              float_parts=float_parts,
                              block_elements=block_elements)
    if not two_stage:
        return DetectorPrograms(dense)
    recorded = _roi_head_inputs(module, images)
    roi_heads = export_executorch(
        {
            name: (head, recorded[name][0])
            for name, head in _roi_heads(module).items()
        },
        None,
        paths['roi_heads'],
        laplace=laplace,
        quantize=quantize,
        calibration=recorded if calibration is not None else None,
        float_parts=float_parts,
        block_elements=block_elements)
    return DetectorPrograms(dense, roi_heads)


__all__ = [
    'DetectorPrograms', 'check_input_shape', 'export_detector_executorch',
    'program_paths'
]
