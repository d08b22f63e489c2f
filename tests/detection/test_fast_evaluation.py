"""tools/test.py --amp and --compile: the backbone and neck in bfloat16 and
compiled by inductor, the heads as they were."""
import pytest
import torch
from detection_utils import (MASK_RCNN_CONFIG, RETINANET_CONFIG,
                             read_test_metrics, run_tool)
from mmdet.models.test_time_augs import DetTTAModel
from mmdet.registry import MODELS
from mmdet.utils import register_all_modules
from mmengine.config import Config

from mmlaplacian.engine import (compile_parts, configure_test_amp,
                                run_in_bfloat16)
from mmlaplacian.engine.cpu_autocast import feature_parts

needs_cpu_amp = pytest.mark.skipif(
    torch.cuda.is_available(),
    reason='with a GPU, --amp is mmengine\'s float16 test loop')


@pytest.fixture
def detector() -> torch.nn.Module:
    """The narrow RetinaNet of the test configs, random weights."""
    register_all_modules()
    torch.manual_seed(0)
    return MODELS.build(Config.fromfile(RETINANET_CONFIG).model).eval()


def dtypes_of(modules):
    """Record the output dtype of each of ``modules`` by name."""
    seen = {}

    def recorder(name):

        def hook(module, args, out):
            seen.setdefault(name, out.dtype)  # returns None: output kept

        return hook

    for name, module in modules.items():
        module.register_forward_hook(recorder(name))
    return seen


def relative_errors(outs, reference):
    return [((a - b).norm() / b.norm()).item()
            for a, b in zip(outs, reference)]


@needs_cpu_amp
def test_bfloat16_covers_backbone_and_neck_only(detector):
    image = torch.randn(1, 3, 64, 96)
    with torch.no_grad():
        reference = detector.extract_feat(image)
    keys = list(detector.state_dict())
    assert run_in_bfloat16(detector) == ['LaplacianFormer', 'FPN']
    seen = dtypes_of({
        'backbone linear': next(m for m in detector.backbone.modules()
                                if isinstance(m, torch.nn.Linear)),
        'neck': detector.neck.fpn_convs[0],
        'head': detector.bbox_head.retina_cls,
    })
    with torch.no_grad():
        feats = detector.extract_feat(image)
        detector.bbox_head(feats)
    assert seen == {'backbone linear': torch.bfloat16,
                    'neck': torch.bfloat16, 'head': torch.float32}
    # Handed on in float32, within bfloat16's rounding of float32's.
    assert all(f.dtype == torch.float32 for f in feats)
    errors = relative_errors(feats, reference)
    assert all(1e-4 < e < 5e-2 for e in errors), errors
    # The checkpoint's keys are the model's as before; a second call does
    # not wrap the forward again.
    assert list(detector.state_dict()) == keys
    run_in_bfloat16(detector)
    inner = detector.backbone.forward.__wrapped__
    assert not getattr(inner, 'runs_in_bfloat16', False)


# Two input sizes, as a detector's test set has: the second compiles anew
# (a graph for all sizes would fail to lower the landmark grid's sizes).
@pytest.mark.timeout(900)
def test_compiled_parts_keep_keys_and_outputs_at_two_sizes(detector):
    images = [torch.randn(1, 3, 64, 96), torch.randn(1, 3, 96, 64)]
    with torch.no_grad():
        references = [detector.extract_feat(image) for image in images]
    keys = list(detector.state_dict())
    # The patch gives this process's other tests their inductor config back.
    with torch._inductor.config.patch(freezing=False):
        assert compile_parts(detector, freezing=True) == [
            'LaplacianFormer', 'FPN']
        assert torch._inductor.config.freezing
        with torch.no_grad():
            outputs = [detector.extract_feat(image) for image in images]
    assert list(detector.state_dict()) == keys
    for feats, reference in zip(outputs, references):
        errors = relative_errors(feats, reference)
        assert max(errors) < 1e-5, errors


def test_parts_are_found_through_wrappers(detector):
    tta = DetTTAModel(module=detector,
                      tta_cfg=dict(nms=dict(type='nms', iou_threshold=0.5)))
    assert feature_parts(tta) == [detector.backbone, detector.neck]
    plain = torch.nn.Linear(2, 2)
    assert feature_parts(plain) == [plain]


@needs_cpu_amp
def test_cpu_amp_leaves_the_config_alone():
    cfg = Config(dict(test_cfg=dict(type='TestLoop')))
    assert configure_test_amp(cfg) is True
    assert cfg.test_cfg == dict(type='TestLoop')


# Evaluates the over-fitted Mask R-CNN as tools/test.py's plain run does
# (mask_rcnn_test_run), the first batch compiling the backbone and neck.
@needs_cpu_amp
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_test_tool_amp_compile_scores_as_float32(
        tmp_path, trained_mask_rcnn, mask_rcnn_test_run, synthetic_env):
    proc = run_tool([
        'tools/test.py', MASK_RCNN_CONFIG, trained_mask_rcnn['checkpoint'],
        '--work-dir', str(tmp_path), '--amp', '--compile', '--cfg-options',
        *trained_mask_rcnn['evaluate']
    ], env=synthetic_env)
    assert '--amp: LaplacianFormer, FPN in bfloat16' in proc.stdout
    assert ('--compile: LaplacianFormer, FPN compiled by inductor'
            in proc.stdout)
    metrics = read_test_metrics(str(tmp_path))
    float32 = read_test_metrics(mask_rcnn_test_run['work_dir'])
    for key in ('coco/bbox_mAP', 'coco/segm_mAP'):
        assert metrics[key] == pytest.approx(float32[key], abs=0.05), key
