"""ONNX export of LaplacianFormer backbones and mmdet detectors with
standard operators only, run in a stock onnxruntime; ExecuTorch programs of
the same models, detectors with their NMS and RoI Align on the host; and
AOTInductor packages, compiled ahead of time for the CPU.

Importing this package and exporting a backbone or segmentor need torch
only (detectors: torchvision and mmdet); ONNX export needs ``onnx`` and
``onnxscript``, running ``onnxruntime``
(``requirements/deploy.txt``). The checks of an export against PyTorch are
``python -m benchmarks.onnx_parity``, ``benchmarks.runtime_accuracy`` and
``benchmarks.runtime_speed``.
"""
from .aoti_export import AOTIPackage, AOTIResult, export_aoti, load_aoti
from .box_ops import batched_nms_keep, decode_deltas, roi_align_levels
from .detectors import (DenseStage, ExportableRetinaNet,
                        ExportableTwoStageDetector, build_exportable_detector)
from .executorch_detectors import (DetectorPrograms,
                                   export_detector_executorch, program_paths)
from .executorch_runner import ExecuTorchDetector
from .export import (BackboneForExport, ExportError, ExportResult, export_onnx)
from .loading import load_detector
from .onnx_ops import nms_keep_mask, onnx_translation_table
from .segmentors import SegmentorForExport
from .runtime import (Detections, detections_from_ort, graph_input, ort_run,
                      ort_session, paste_masks)
from .unsupported import ExportUnsupportedError, check_exportable

__all__ = [
    'AOTIPackage', 'AOTIResult', 'BackboneForExport', 'DenseStage',
    'DetectorPrograms', 'Detections', 'ExecuTorchDetector', 'ExportError',
    'ExportResult', 'ExportUnsupportedError', 'ExportableRetinaNet',
    'ExportableTwoStageDetector', 'SegmentorForExport', 'batched_nms_keep',
    'build_exportable_detector', 'check_exportable', 'decode_deltas',
    'detections_from_ort', 'export_aoti', 'export_detector_executorch',
    'export_onnx', 'graph_input', 'load_aoti', 'load_detector',
    'nms_keep_mask', 'onnx_translation_table', 'ort_run', 'ort_session',
    'paste_masks', 'program_paths', 'roi_align_levels'
]
