"""A detector run as ExecuTorch programs, with the host steps in PyTorch,
returning mmdet's ``DetDataSample`` so mmdet's evaluators score it.

The programs (:func:`~mmlaplacian.deployment.executorch_detectors.
export_detector_executorch`) hold the networks and their weights; the
config gives what runs on the host: the prior generator, the box coders,
``test_cfg`` (NMS, thresholds, counts), the RoI extractors and the data
preprocessor's normalisation. The host runs the same stage functions as
the ONNX graph (``detect`` of :mod:`mmlaplacian.deployment.detectors`)
eagerly: top-k, box decoding, torchvision's NMS and RoI Align.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from .detectors import ExportableTwoStageDetector, build_exportable_detector
from .executorch_detectors import (BBOX_HEAD_METHOD, DENSE_METHOD,
                                   MASK_HEAD_METHOD)
from .executorch_kernels import load_program, method_input_sizes
from .runtime import paste_masks


class ProgramMethod:
    """One method of a loaded ExecuTorch program, called like the module
    it was exported from: a tensor for one output, a tuple for several.

    Args:
        program: An ``executorch.runtime.Program``.
        name (str): The method.
        path (str): The program's file (named in errors).

    Raises:
        ValueError: The program has no such method.
    """

    def __init__(self, program, name: str, path: str) -> None:
        if name not in program.method_names:
            raise ValueError(f'{path} has no method {name!r} (it has '
                             f'{sorted(program.method_names)}): not a '
                             f'program of this detector type')
        self.where = f'{path}:{name}'
        self.input_sizes = method_input_sizes(program, name)
        self.num_outputs = program.metadata(name).num_outputs()
        self.method = program.load_method(name)

    def __call__(self, *args: torch.Tensor):
        for index, (arg, size) in enumerate(zip(args, self.input_sizes)):
            if tuple(arg.shape) != size:
                raise ValueError(
                    f'{self.where}: input {index} has shape '
                    f'{tuple(arg.shape)}, the program was exported for '
                    f'{size}; run it with the config it was exported from '
                    f'(test_cfg counts such as max_per_img fix these shapes)')
        outputs = self.method.execute([a.contiguous() for a in args])
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _build_detector(config):
    """The detector of ``config`` without weights (the programs have
    them): its heads' priors, coders and test settings run on the host."""
    from mmdet.registry import MODELS
    from mmengine.config import Config
    from mmengine.registry import init_default_scope

    import mmlaplacian  # noqa: F401  (registers LaplacianFormer)

    cfg = Config.fromfile(config) if isinstance(config, str) else config
    init_default_scope(cfg.get('default_scope', 'mmdet'))
    return MODELS.build(cfg.model).eval()


class ExecuTorchDetector:
    """An mmdet detector whose networks run in ExecuTorch's runtime.

    Args:
        config (str | Config): The detector's config (file or object), the
            one the programs were exported from.
        dense (str): The dense program (RetinaNet's only program, or the
            ``.dense.pte`` of a two-stage detector).
        roi_heads (str, optional): A two-stage detector's ``.roi_heads.pte``.

    Raises:
        ValueError: A program missing, superfluous or not matching the
            config.
        ExportUnsupportedError: The config's detector has no export path.

    Example:
        >>> programs = export_detector_executorch(model, (192, 192), 'm.pte')
        >>> runner = ExecuTorchDetector(cfg, **programs.paths)
        >>> for batch in dataloader:
        ...     evaluator.process(runner.test_step(batch), batch)
    """

    def __init__(self,
                 config,
                 dense: str,
                 roi_heads: Optional[str] = None) -> None:
        detector = _build_detector(config)
        self.module = build_exportable_detector(detector)
        self.dense = ProgramMethod(load_program(dense), DENSE_METHOD, dense)
        if len(self.dense.input_sizes) != 1 or len(
                self.dense.input_sizes[0]) != 4:
            raise ValueError(f'{dense}: a detector program takes one '
                             f'(1, 3, H, W) image, this one takes '
                             f'{self.dense.input_sizes}')
        self.input_shape = self.dense.input_sizes[0][-2:]
        levels = self.module.dense.num_levels
        stages: Tuple = (self.dense, )
        self.mask_thr = None
        two_stage = isinstance(self.module, ExportableTwoStageDetector)
        if two_stage:
            if roi_heads is None:
                raise ValueError('a two-stage detector runs two programs: '
                                 'pass roi_heads (the .roi_heads.pte file)')
            program = load_program(roi_heads)
            stages += (ProgramMethod(program, BBOX_HEAD_METHOD, roi_heads), )
            if self.module.with_mask:
                stages += (ProgramMethod(program, MASK_HEAD_METHOD,
                                         roi_heads), )
                self.mask_thr = self.module.rcnn_cfg.mask_thr_binary
        elif roi_heads is not None:
            raise ValueError(f'{type(detector).__name__} runs one program; '
                             f'roi_heads={roi_heads!r} is not used')
        # The neck's maps the RoI heads pool from, then classification and
        # box maps per level.
        expected = self.module.dense.num_features + 2 * levels
        if self.dense.num_outputs != expected:
            raise ValueError(
                f'{dense} returns {self.dense.num_outputs} maps; the '
                f'config\'s detector needs {expected} ({levels} levels): the '
                f'program belongs to another config')
        self.stages = stages
        preprocessor = detector.data_preprocessor
        self.pad_pixel = self.module.dense.normalize.pixel_of(
            float(getattr(preprocessor, 'pad_value', 0)))

    def pad(self, image: torch.Tensor) -> torch.Tensor:
        """``(3, h, w)`` to the program's ``(1, 3, H, W)`` float input,
        padded at the bottom and right with the pixel that normalises to
        the data preprocessor's ``pad_value``, as mmdet pads a batch.

        Raises:
            ValueError: The image is larger than the program's input.
        """
        if image.dim() != 3 or image.shape[0] != 3:
            raise ValueError(f'an image is (3, h, w), got '
                             f'{tuple(image.shape)}')
        height, width = self.input_shape
        h, w = image.shape[-2:]
        if h > height or w > width:
            raise ValueError(
                f'image of {h}x{w} pixels is larger than the program\'s '
                f'input {height}x{width}: resize it with the config\'s test '
                f'pipeline, or export the programs at a larger shape')
        padded = self.pad_pixel.view(1, 3, 1, 1).expand(1, 3, height,
                                                        width).clone()
        padded[..., :h, :w] = image.float()
        return padded

    def predict(self, inputs: Union[torch.Tensor, np.ndarray,
                                    Sequence[torch.Tensor]],
                data_samples: Optional[Sequence] = None) -> List:
        """Detections of each image, as mmdet's ``predict`` gives them.

        Args:
            inputs: The dataloader's ``inputs`` (a list of ``(3, h, w)``
                tensors after the test pipeline), or one image: a
                ``(3, h, w)`` tensor or an ``(h, w, 3)`` array as mmcv
                loads it (BGR).
            data_samples (list[DetDataSample], optional): The dataloader's
                ``data_samples`` (``img_shape``, ``ori_shape`` and
                ``scale_factor`` are read); without them each image is its
                own original (scale 1).

        Returns:
            list[DetDataSample]: One per image, with ``pred_instances``:
            ``bboxes`` in original-image pixels, ``scores``, ``labels``
            and, for Mask R-CNN, boolean ``masks`` at the original size.
        """
        from mmdet.structures import DetDataSample

        if isinstance(inputs, np.ndarray):
            inputs = torch.from_numpy(np.ascontiguousarray(inputs)).permute(
                2, 0, 1)
        if isinstance(inputs, torch.Tensor):
            inputs = [inputs]
        if data_samples is None:
            data_samples = [
                DetDataSample(metainfo=dict(img_shape=tuple(i.shape[-2:]),
                                            ori_shape=tuple(i.shape[-2:]),
                                            scale_factor=(1., 1.)))
                for i in inputs
            ]
        if len(data_samples) != len(inputs):
            raise ValueError(f'{len(inputs)} images, {len(data_samples)} '
                             f'data samples')
        return [
            self._predict_one(image, sample)
            for image, sample in zip(inputs, data_samples)
        ]

    def test_step(self, data: dict) -> List:
        """:meth:`predict` on a dataloader batch (mmdet's ``test_step``)."""
        return self.predict(data['inputs'], data['data_samples'])

    def outputs(self,
                image: torch.Tensor,
                image_hw: Optional[Sequence[int]] = None
                ) -> Dict[str, torch.Tensor]:
        """The detector's outputs on one image, as the exported ONNX graph
        and the eager ``ExportableTwoStageDetector`` give them: fixed-size
        ``boxes``, ``scores``, ``labels``, ``num_dets`` and, for Mask
        R-CNN, ``masks`` (``(D, M, M)`` probabilities, not yet pasted).

        Args:
            image (Tensor): ``(3, h, w)`` after the test pipeline.
            image_hw (sequence[int], optional): The unpadded image's
                ``(h, w)`` boxes are clipped to (mmdet's ``img_shape``);
                default: the image's own.

        Returns:
            dict[str, Tensor]: The outputs by name.
        """
        hw = tuple(image.shape[-2:]) if image_hw is None else image_hw
        with torch.no_grad():
            outputs = self.module.detect(self.pad(image), hw[:2],
                                         *self.stages)
        return dict(zip(self.module.output_names, outputs))

    def _predict_one(self, image: torch.Tensor, sample):
        from mmengine.structures import InstanceData

        named = self.outputs(image, sample.metainfo['img_shape'])
        count = int(named['num_dets'])
        scale_w, scale_h = sample.metainfo.get('scale_factor', (1., 1.))
        boxes = named['boxes'][:count] / named['boxes'].new_tensor(
            [scale_w, scale_h, scale_w, scale_h])
        pred = InstanceData(bboxes=boxes,
                            scores=named['scores'][:count],
                            labels=named['labels'][:count])
        if 'masks' in named:
            pred.masks = torch.from_numpy(
                paste_masks(named['masks'][:count].numpy(), boxes.numpy(),
                            sample.metainfo['ori_shape'][:2], self.mask_thr))
        result = sample.clone()
        result.pred_instances = pred
        return result


__all__ = ['ExecuTorchDetector', 'ProgramMethod']
