"""A missing dataset or ImageNet checkpoint is refused before any model is
built, in a few lines that say how to go on."""
import os
import os.path as osp
import sys
import time

import pytest
from detection_utils import repo_path, run_tool, tool_env
from mmdet.registry import DATASETS
from mmengine.registry import init_default_scope

from mmlaplacian.datasets import DatasetNotFoundError
from mmlaplacian.models.checkpoint import PretrainedNotFoundError

MASK_RCNN = repo_path('configs', 'mask_rcnn', 'lf_tiny_1x.py')
SEM_FPN = repo_path('configs', 'sem_fpn', 'lf_tiny_fpn_40k_ade20k.py')
MMDET_TRAIN = osp.join(
    osp.dirname(sys.modules['mmdet'].__file__), '.mim', 'tools', 'train.py')


def refusal(tool, argv, error_type) -> str:
    """The message of the ``error_type`` that ``tool.main(argv)`` raises."""
    with pytest.raises(error_type) as error:
        tool.main(argv)
    return str(error.value)


def fake_coco(root) -> str:
    """Empty files and folders in COCO's layout: enough for the checks."""
    os.makedirs(root / 'annotations')
    for split in ('train2017', 'val2017'):
        os.makedirs(root / split)
        (root / 'annotations' / f'instances_{split}.json').write_text('{}')
    return str(root)


@pytest.fixture
def no_dataset_roots(monkeypatch):
    for variable in ('COCO_ROOT', 'ADE_ROOT'):
        monkeypatch.delenv(variable, raising=False)


def test_train_without_coco_names_path_variable_and_demo(
        load_script, no_dataset_roots, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no data/coco here
    message = refusal(load_script('tools/train.py'),
                      [MASK_RCNN, '--work-dir', str(tmp_path)],
                      DatasetNotFoundError)
    assert message.splitlines() == [
        'No such file or directory: data/coco/ (train_dataloader.dataset).',
        'COCO 2017 is not there: the config looks in data/coco/ (the '
        'default, COCO_ROOT being unset). Set COCO_ROOT to the folder that '
        "holds it (mmdet's layout: annotations/instances_{train,val}2017"
        '.json, train2017/, val2017/).',
        'To try the model without COCO 2017: make demo (synthetic shapes in '
        'COCO format: Mask R-CNN trained and evaluated on a CPU in about 10 '
        'minutes).'
    ]


def test_coco_root_without_annotations(load_script, tmp_path, monkeypatch):
    root = tmp_path / 'coco'
    os.makedirs(root / 'train2017')
    monkeypatch.setenv('COCO_ROOT', str(root))
    message = refusal(load_script('tools/train.py'),
                      [MASK_RCNN, '--work-dir', str(tmp_path)],
                      DatasetNotFoundError)
    assert message.startswith(
        f'No such file or directory: {root}/annotations/instances_train2017'
        '.json (train_dataloader.dataset).')
    assert f'(COCO_ROOT={root})' in message and 'make demo' in message


def test_test_tool_without_coco(load_script, tmp_path, monkeypatch):
    checkpoint = tmp_path / 'model.pth'
    checkpoint.write_bytes(b'')  # never read: the check comes first
    monkeypatch.setenv('COCO_ROOT', str(tmp_path / 'absent'))
    message = refusal(load_script('tools/test.py'),
                      [MASK_RCNN, str(checkpoint), '--work-dir',
                       str(tmp_path)], DatasetNotFoundError)
    assert message.startswith(f'No such file or directory: {tmp_path}/absent'
                              '/ (test_dataloader.dataset).')
    assert 'COCO_ROOT' in message and 'make demo' in message


def test_train_without_ade20k(load_script, no_dataset_roots, tmp_path,
                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = refusal(load_script('tools/train.py'),
                      [SEM_FPN, '--work-dir', str(tmp_path)],
                      DatasetNotFoundError)
    assert message.startswith('No such file or directory: '
                              'data/ade/ADEChallengeData2016 '
                              '(train_dataloader.dataset.dataset).') or \
        message.startswith('No such file or directory: '
                           'data/ade/ADEChallengeData2016 '
                           '(train_dataloader.dataset).')
    assert 'ADE_ROOT being unset' in message
    assert 'make demo-seg' in message


def test_missing_imagenet_checkpoint_gives_three_ways(load_script, tmp_path,
                                                      monkeypatch):
    monkeypatch.setenv('COCO_ROOT', fake_coco(tmp_path / 'coco'))
    monkeypatch.chdir(tmp_path)  # no checkpoints/ here
    message = refusal(load_script('tools/train.py'),
                      [MASK_RCNN, '--work-dir', str(tmp_path)],
                      PretrainedNotFoundError)
    lines = message.splitlines()
    assert lines[0] == ('No such file or directory: checkpoints/'
                        'lf_tiny_in1k.pth (model.backbone.init_cfg: the '
                        'ImageNet-1k checkpoint the backbone starts from).')
    assert 'No ImageNet checkpoint of LaplacianFormer is published yet' in (
        lines[1])
    assert ('bash tools/dist_train.sh configs/imagenet/lf_tiny_in1k.py 8 '
            '--auto-scale-lr') in lines[2]
    assert ('python tools/model_converters/laplacianformer_to_mmdet.py '
            'SRC.pth checkpoints/lf_tiny_in1k.pth --arch tiny') in lines[3]
    assert '--cfg-options model.backbone.init_cfg=None' in lines[4]
    assert 'unmeasured' in lines[4] and 'several AP' in lines[4]
    assert len(lines) == 5


def test_command_line_refusal_is_short_and_quick(tmp_path):
    """The tool itself: exit status 2, a few lines, no traceback, and no
    model built (seconds, not the minute of set-up)."""
    env = tool_env(COCO_ROOT=fake_coco(tmp_path / 'coco'))
    start = time.monotonic()
    proc = run_tool(['tools/train.py', MASK_RCNN, '--work-dir',
                     str(tmp_path / 'work')], env=env, expect_success=False)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert 'Traceback' not in proc.stdout
    # The message ends the output (before it: mmengine's note on COCO_ROOT
    # and the environment's own warnings).
    message = proc.stdout[proc.stdout.index('train.py: error: '):]
    assert message.startswith('train.py: error: No such file or directory: '
                              'checkpoints/lf_tiny_in1k.pth')
    assert len(message.splitlines()) == 5
    assert not osp.exists(tmp_path / 'work')  # no runner was built
    assert time.monotonic() - start < 60


def test_checked_coco_dataset_refuses_missing_data(tmp_path, monkeypatch):
    """The check inside the dataset, for mmdet's own tools."""
    monkeypatch.setenv('COCO_ROOT', str(tmp_path / 'absent'))
    init_default_scope('mmdet')
    with pytest.raises(DatasetNotFoundError) as error:
        DATASETS.build(
            dict(
                type='CheckedCocoDataset',
                data_root=f'{tmp_path}/absent/',
                ann_file='annotations/instances_val2017.json',
                data_prefix=dict(img='val2017/'),
                pipeline=[]))
    message = str(error.value)
    assert message.startswith(f'No such file or directory: {tmp_path}/'
                              'absent/ (the training dataset).')
    assert f'COCO_ROOT={tmp_path}/absent' in message
    assert 'make demo' in message


@pytest.mark.slow
@pytest.mark.skipif(not osp.isfile(MMDET_TRAIN),
                    reason="mmdet's tools/train.py is not installed")
def test_mmdet_train_tool_with_our_config_names_the_way_on(tmp_path):
    proc = run_tool([
        MMDET_TRAIN, MASK_RCNN, '--work-dir',
        str(tmp_path / 'work')
    ], env=tool_env(COCO_ROOT=str(tmp_path / 'absent')),
                    expect_success=False)
    assert proc.returncode != 0
    assert 'DatasetNotFoundError: No such file or directory: ' \
        f'{tmp_path}/absent/ (the training dataset).' in proc.stdout
    assert 'make demo (synthetic shapes' in proc.stdout
