"""Running an exported model in onnxruntime (CPU): the session, its input
and its detections in image pixels."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np
import torch


def ort_session(path: str, num_threads: int = 0, arena: bool = True):
    """A CPU ``onnxruntime.InferenceSession`` of the stock wheel.

    Args:
        path (str): The ``.onnx`` file.
        num_threads (int): Intra-op threads; 0 uses torch's thread count, so
            both runtimes get the same cores.
        arena (bool): onnxruntime's CPU memory arena. It keeps freed blocks
            and grows by doubling: off, the LaplacianFormer-T backbone's
            peak at 800x1344 halves at equal latency (docs/deployment.md).
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = num_threads or torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.enable_cpu_mem_arena = arena
    options.graph_optimization_level = \
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: no constant-folding notes
    return ort.InferenceSession(path,
                                sess_options=options,
                                providers=['CPUExecutionProvider'])


def ort_run(session, image: torch.Tensor) -> List[np.ndarray]:
    """Run the session on one input tensor; outputs in graph order."""
    name = session.get_inputs()[0].name
    return session.run(None, {name: image.detach().cpu().numpy()})


def graph_input(shape: Sequence[int],
                detector: bool,
                image_path: Optional[str] = None) -> torch.Tensor:
    """``(1, 3, H, W)`` for an exported graph: pixels as the pipeline loads
    them (detectors) or a normalised-like tensor (backbones), from
    ``image_path`` resized to ``shape`` or seeded random values."""
    height, width = shape
    if image_path:
        import mmcv
        pixels = mmcv.imresize(mmcv.imread(image_path), (width, height))
        image = torch.from_numpy(pixels).permute(2, 0, 1)[None].float()
        if not detector:
            image = (image - image.mean()) / image.std().clamp_min(1e-6)
        return image
    generator = torch.Generator().manual_seed(0)
    if detector:
        return torch.rand(1, 3, height, width, generator=generator) * 255
    return torch.randn(1, 3, height, width, generator=generator)


@dataclass
class Detections:
    """One image's detections: boxes ``(n, 4)``, scores, labels and
    optional full-image boolean masks ``(n, H, W)``."""
    boxes: np.ndarray
    scores: np.ndarray
    labels: np.ndarray
    masks: Optional[np.ndarray] = None

    @classmethod
    def from_instances(cls, instances) -> 'Detections':
        """From mmdet's ``pred_instances``."""
        masks = getattr(instances, 'masks', None)
        return cls(instances.bboxes.detach().cpu().numpy(),
                   instances.scores.detach().cpu().numpy(),
                   instances.labels.detach().cpu().numpy(),
                   None if masks is None else masks.detach().cpu().numpy())


def paste_masks(probs: np.ndarray,
                boxes: np.ndarray,
                image_hw: Sequence[int],
                threshold: float = 0.5) -> np.ndarray:
    """Paste ``(n, M, M)`` mask probabilities into ``(n, H, W)`` boolean
    image masks, as mmdet's ``FCNMaskHead`` does on the CPU (``>=
    threshold``).

    Like mmdet on the CPU, each mask is resampled only over the pixels
    around its own box: bilinear sampling is zero further out, so the
    result equals a paste over the whole image at a fraction of the cost
    (a few detections at 800x1344 take milliseconds instead of hundreds).
    """
    from mmdet.models.roi_heads.mask_heads.fcn_mask_head import \
        _do_paste_mask

    height, width = int(image_hw[0]), int(image_hw[1])
    pasted = np.zeros((len(probs), height, width), dtype=bool)
    probs_t = torch.from_numpy(np.ascontiguousarray(probs))[:, None]
    boxes_t = torch.from_numpy(np.ascontiguousarray(boxes)).float()
    for index in range(len(probs)):
        x0, y0, x1, y1 = boxes[index]
        if x0 >= width + 1 or y0 >= height + 1 or x1 <= -1 or y1 <= -1:
            continue  # outside the image: nothing to paste
        region, (rows, cols) = _do_paste_mask(probs_t[index:index + 1],
                                              boxes_t[index:index + 1],
                                              height,
                                              width,
                                              skip_empty=True)
        pasted[index, rows, cols] = (region[0] >= threshold).numpy()
    return pasted


def detections_from_ort(outputs: Sequence[np.ndarray],
                        names: Sequence[str],
                        image_hw: Sequence[int],
                        mask_threshold: float = 0.5) -> Detections:
    """The valid rows of the exported detector's outputs, masks pasted."""
    named = dict(zip(names, outputs))
    count = int(named['num_dets'])
    boxes = named['boxes'][:count]
    masks = None
    if 'masks' in named:
        masks = paste_masks(named['masks'][:count], boxes, image_hw,
                            mask_threshold)
    return Detections(boxes, named['scores'][:count], named['labels'][:count],
                      masks)
