"""ONNX export of LaplacianFormer backbones and mmdet detectors with
standard operators only, checked in a stock onnxruntime.

Importing this package needs torch, torchvision and mmengine; exporting
needs ``onnx`` and ``onnxscript``, running ``onnxruntime``
(``requirements/deploy.txt``).
"""
from .box_ops import batched_nms_keep, decode_deltas, roi_align_levels
from .compare import (DetectionComparison, Detections, compare_detections,
                      compare_features, detections_from_ort, paste_masks)
from .detectors import (ExportableRetinaNet, ExportableTwoStageDetector,
                        build_exportable_detector)
from .export import (BackboneForExport, ExportError, ExportResult, export_onnx)
from .onnx_ops import nms_keep_mask, onnx_translation_table
from .reference import build_model, mmdet_predict
from .runtime import ort_run, ort_session, time_calls, time_interleaved
from .unsupported import ExportUnsupportedError, check_exportable

__all__ = [
    'BackboneForExport', 'DetectionComparison', 'Detections', 'ExportError',
    'ExportResult', 'ExportUnsupportedError', 'ExportableRetinaNet',
    'ExportableTwoStageDetector', 'batched_nms_keep',
    'build_exportable_detector', 'build_model', 'check_exportable',
    'compare_detections', 'compare_features', 'decode_deltas',
    'detections_from_ort', 'export_onnx', 'mmdet_predict', 'nms_keep_mask',
    'onnx_translation_table', 'ort_run', 'ort_session', 'paste_masks',
    'roi_align_levels', 'time_calls', 'time_interleaved'
]
