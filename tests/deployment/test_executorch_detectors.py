"""Detectors end to end on ExecuTorch: the networks as XNNPACK programs, the
proposals, RoI Align and NMS on the host (ExecuTorchDetector), compared
with mmdet's own test_step on the same image through the config's test
pipeline. Random weights under a fixed seed (a clean clone has no trained
checkpoint). Skipped where executorch is not installed."""
import copy

import numpy as np
import pytest
import torch

pytest.importorskip('executorch')

from mmengine.config import Config  # noqa: E402

from mmlaplacian.deployment import (  # noqa: E402
    Detections, ExecuTorchDetector, export_detector_executorch,
    load_detector)

from benchmarks.onnx_compare import compare_detections  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

# The quick-start Mask R-CNN with the narrow test backbone, 128-pixel images:
# lowering the LaplacianFormer-T quick start takes minutes on 2 cores.
MASK_RCNN = 'tests/detection/configs/mask_rcnn_synthetic.py'
RETINANET = 'tests/deployment/configs/retinanet_spread_scores.py'


def shapes_image(height: int, width: int) -> np.ndarray:
    """A fixed BGR image: a colour gradient with a few filled shapes."""
    y, x = np.mgrid[:height, :width].astype(np.float32)
    image = np.stack(
        [x * 255 / width, y * 255 / height,
         np.full_like(x, 90.)], -1)
    image[height // 10:height // 3, width // 8:width // 2] = (200, 40, 40)
    disc = (y - 0.6 * height)**2 + (x - 0.7 * width)**2 < (height / 5)**2
    image[disc] = (30, 200, 60)
    image[(np.abs(y - 0.75 * height) + np.abs(x - 0.25 * width)) <
          height / 6] = (240, 240, 240)
    return image.astype(np.uint8)


def pipeline_batch(cfg, image: np.ndarray) -> dict:
    """One image through the config's test pipeline (loaded from memory,
    no annotations), collated as the dataloader does."""
    from mmcv.transforms import Compose
    from mmengine.dataset import pseudo_collate
    steps = [dict(type='mmdet.LoadImageFromNDArray')]
    for step in cfg.test_pipeline:
        if step['type'] in ('LoadImageFromFile', 'LoadAnnotations'):
            continue
        step = dict(step, type='mmdet.' + step['type'])
        if step['type'] == 'mmdet.PackDetInputs':
            step['meta_keys'] = ('img_id', 'ori_shape', 'img_shape',
                                 'scale_factor')
        steps.append(step)
    return pseudo_collate([Compose(steps)(dict(img=image, img_id=0))])


def exported(tmp_path_factory, config, shape, name):
    """The detector of ``config`` with seeded random weights, exported at
    ``shape``. mmdet's data preprocessor pads to the program's size
    (``pad_size_divisor``), so the reference sees the same padded input
    as the programs."""
    cfg = Config.fromfile(config)
    cfg.merge_from_dict({'model.data_preprocessor.pad_size_divisor': shape[0]})
    model = load_detector(cfg)
    out = str(tmp_path_factory.mktemp(name) / f'{name}.pte')
    programs = export_detector_executorch(model, shape, out)
    return cfg, model, programs


@pytest.fixture(scope='module')
def mask_rcnn(tmp_path_factory):
    return exported(tmp_path_factory, MASK_RCNN, (128, 128), 'mask_rcnn')


@pytest.fixture(scope='module')
def retinanet(tmp_path_factory):
    return exported(tmp_path_factory, RETINANET, (128, 128), 'retinanet')


def assert_matches_mmdet(cfg, model, programs, image):
    batch = pipeline_batch(cfg, image)
    runner = ExecuTorchDetector(cfg, **programs.paths)
    got = runner.test_step(batch)[0]
    with torch.no_grad():
        expected = model.test_step(batch)[0]
    assert got.metainfo['ori_shape'] == image.shape[:2]
    ours = Detections.from_instances(got.pred_instances)
    ref = Detections.from_instances(expected.pred_instances)
    comparison = compare_detections(ours, ref)
    assert len(ref.scores) > 0 and len(ours.scores) > 0
    assert comparison.ok, comparison.lines()
    return ours, ref


def test_mask_rcnn_two_programs_match_mmdet(mask_rcnn):
    """The quick-start Mask R-CNN as two programs: a 240x320 image, resized
    to 96x128 by the test pipeline and padded to the 128x128 program;
    boxes and masks back at 240x320, as mmdet's."""
    cfg, model, programs = mask_rcnn
    assert set(programs.paths) == {'dense', 'roi_heads'}
    assert set(programs.roi_heads.methods) == {'bbox_head', 'mask_head'}
    # The RoI heads are convolutions and fully connected layers only.
    assert not programs.roi_heads.portable_ops, programs.roi_heads.portable_ops
    ours, ref = assert_matches_mmdet(cfg, model, programs,
                                     shapes_image(240, 320))
    assert ours.masks.shape[1:] == ref.masks.shape[1:] == (240, 320)
    # Boxes in original pixels: some reach past the 128-pixel resize.
    assert ours.boxes[:, 2].max() > 128


def test_mask_rcnn_outputs_match_the_eager_export_module(mask_rcnn):
    """``outputs`` gives the exported graph's fixed-size outputs, masks as
    probabilities, equal to the eager module the programs came from."""
    from mmlaplacian.deployment import build_exportable_detector
    cfg, model, programs = mask_rcnn
    runner = ExecuTorchDetector(cfg, **programs.paths)
    # An image of the program's size: the module clips to its input's.
    image = torch.from_numpy(shapes_image(128, 128)).permute(2, 0, 1)
    got = runner.outputs(image)
    with torch.no_grad():
        expected = build_exportable_detector(model).eval()(runner.pad(image))
    expected = dict(zip(runner.module.output_names, expected))
    assert list(got) == ['boxes', 'scores', 'labels', 'num_dets', 'masks']
    count = int(expected['num_dets'])
    assert count > 0 and int(got['num_dets']) == count
    for name in ('boxes', 'scores', 'masks'):
        assert torch.allclose(got[name][:count], expected[name][:count],
                              atol=1e-3), name
    assert torch.equal(got['labels'][:count], expected['labels'][:count])
    assert got['masks'].shape[1:] == (28, 28)


def test_retinanet_program_matches_mmdet(retinanet):
    """RetinaNet's dense part in one program, decoding and NMS on the host:
    a 96x160 image, resized to 77x128 and padded to the 128x128 program."""
    cfg, model, programs = retinanet
    assert set(programs.paths) == {'dense'}
    assert_matches_mmdet(cfg, model, programs, shapes_image(96, 160))


def test_a_too_large_image_is_a_clear_error(retinanet):
    cfg, _, programs = retinanet
    runner = ExecuTorchDetector(cfg, **programs.paths)
    image = torch.zeros(3, 128, 160, dtype=torch.uint8)
    with pytest.raises(ValueError, match='128x160.*larger.*128x128'):
        runner.predict(image)


def test_programs_of_another_config_are_refused(mask_rcnn, retinanet):
    """A config whose counts differ from the export's, or a program of
    another detector type, fails with a message naming the program."""
    cfg, _, programs = mask_rcnn
    changed = copy.deepcopy(cfg)
    changed.model.test_cfg.rpn.max_per_img = 100
    runner = ExecuTorchDetector(changed, **programs.paths)
    with pytest.raises(ValueError, match='bbox_head.*exported for'):
        runner.predict(torch.zeros(3, 128, 128, dtype=torch.uint8))
    with pytest.raises(ValueError, match='two programs'):
        ExecuTorchDetector(cfg, programs.paths['dense'])
    retina_cfg, _, retina_programs = retinanet
    with pytest.raises(ValueError, match='another config'):
        ExecuTorchDetector(retina_cfg, programs.paths['dense'])
