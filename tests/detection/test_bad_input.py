"""Bad input gives a clear message that names the file or key at fault."""
import json
import os.path as osp

import pytest
import torch
from detection_utils import MASK_RCNN_CONFIG, repo_path, run_tool
from mmdet.registry import MODELS
from mmengine.config import Config
from mmengine.registry import init_default_scope

NO_VALIDATION = ['val_dataloader=None', 'val_evaluator=None', 'val_cfg=None']


@pytest.fixture(scope='module')
def random_checkpoint(tmp_path_factory) -> str:
    """Randomly initialised weights of the test Mask R-CNN."""
    path = str(tmp_path_factory.mktemp('bad_input') / 'random.pth')
    cfg = Config.fromfile(MASK_RCNN_CONFIG)
    init_default_scope('mmdet')
    model = MODELS.build(cfg.model)
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, path)
    return path


def failure(tool, argv) -> str:
    """The error with which ``tool.main(argv)`` stops, causes included.

    Run in-process: a subprocess per case would spend most of its time
    importing mmdet. ``test_missing_checkpoint`` runs the command line.
    """
    with pytest.raises(Exception) as error:
        tool.main(argv)
    messages = []
    exc = error.value
    while exc is not None:
        messages.append(f'{type(exc).__name__}: {exc}')
        exc = exc.__cause__ or exc.__context__
    return '\n'.join(messages)


def usage_error(tool, argv, capsys) -> str:
    """The message with which ``tool.parse_args(argv)`` refuses ``argv``."""
    with pytest.raises(SystemExit) as error:
        tool.parse_args(argv)
    assert error.value.code == 2  # argparse's exit status for bad usage
    return capsys.readouterr().err


# Checked in-process, like the cases below: a subprocess would spend
# seconds importing mmdet only to reach argument parsing.
# test_missing_checkpoint runs the command line.
@pytest.mark.parametrize('tool', ['train', 'test'])
def test_missing_config(tool, load_script, capsys, tmp_path):
    missing = str(tmp_path / 'no_such_config.py')
    argv = [missing]
    if tool == 'test':
        argv.append(str(tmp_path / 'model.pth'))
    err = usage_error(load_script(f'tools/{tool}.py'), argv, capsys)
    assert f'config file not found: {missing}' in err


@pytest.mark.slow
def test_missing_checkpoint(tmp_path):
    missing = str(tmp_path / 'no_such_model.pth')
    proc = run_tool(['tools/test.py', MASK_RCNN_CONFIG, missing],
                    expect_success=False)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert f'checkpoint file not found: {missing}' in proc.stdout


def test_checkpoint_that_is_text(synthetic_coco, load_script, monkeypatch,
                                 tmp_path):
    monkeypatch.setenv('SYNTHETIC_COCO', synthetic_coco)
    notes = tmp_path / 'notes.pth'
    notes.write_text('these are not weights\n')
    out = failure(load_script('tools/test.py'), [
        MASK_RCNN_CONFIG, str(notes), '--work-dir', str(tmp_path)])
    assert f'"{notes}" is not a readable PyTorch checkpoint' in out


def test_pretrained_backbone_that_is_text(tmp_path):
    notes = tmp_path / 'lf_tiny_in1k.pth'
    notes.write_text('these are not weights\n')
    cfg = Config.fromfile(repo_path('configs', 'mask_rcnn', 'lf_tiny_1x.py'))
    cfg.model.backbone.init_cfg.checkpoint = str(notes)
    init_default_scope('mmdet')
    detector = MODELS.build(cfg.model)
    with pytest.raises(RuntimeError, match='is not a readable PyTorch'):
        detector.init_weights()
    with pytest.raises(RuntimeError, match=str(notes)):
        detector.init_weights()


def test_missing_annotation_file(synthetic_coco, random_checkpoint,
                                 load_script, monkeypatch, tmp_path):
    monkeypatch.setenv('SYNTHETIC_COCO', synthetic_coco)
    missing = str(tmp_path / 'instances_missing.json')
    out = failure(load_script('tools/test.py'), [
        MASK_RCNN_CONFIG, random_checkpoint, '--work-dir',
        str(tmp_path), '--cfg-options',
        f'test_dataloader.dataset.ann_file={missing}'
    ])
    assert 'No such file or directory' in out and missing in out


def test_listed_image_is_absent(synthetic_coco, random_checkpoint,
                                load_script, monkeypatch, tmp_path):
    monkeypatch.setenv('SYNTHETIC_COCO', synthetic_coco)
    with open(osp.join(synthetic_coco, 'annotations',
                       'instances_val.json')) as f:
        coco = json.load(f)
    coco['images'][0]['file_name'] = 'absent.jpg'
    ann_file = tmp_path / 'instances_val.json'
    ann_file.write_text(json.dumps(coco))
    out = failure(load_script('tools/test.py'), [
        MASK_RCNN_CONFIG, random_checkpoint, '--work-dir',
        str(tmp_path), '--cfg-options',
        f'test_dataloader.dataset.ann_file={ann_file}',
        f'test_evaluator.ann_file={ann_file}'
    ])
    assert 'No such file or directory' in out
    assert osp.join(synthetic_coco, 'val', 'absent.jpg') in out


def test_unknown_variant(synthetic_coco, load_script, monkeypatch, tmp_path):
    monkeypatch.setenv('SYNTHETIC_COCO', synthetic_coco)
    config = tmp_path / 'lf_tinyy_1x.py'
    config.write_text(f"_base_ = '{MASK_RCNN_CONFIG}'\n"
                      "model = dict(backbone=dict(arch='tinyy'))\n")
    out = failure(load_script('tools/train.py'), [
        str(config), '--work-dir',
        str(tmp_path), '--cfg-options', *NO_VALIDATION
    ])
    assert "unknown arch 'tinyy'" in out
    for name in ('tiny', 'small', 'medium', 'large', 'huge'):
        assert f"'{name}'" in out
