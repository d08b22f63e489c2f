"""benchmarks.kernel_ablation --report-only on hand-written scalar logs."""
import json

from benchmarks import kernel_ablation as tool


def write_run(work_dir, arm, seed, box_ap):
    log_dir = work_dir / f'{arm}_seed{seed}' / '20260101_000000' / 'vis_data'
    log_dir.mkdir(parents=True)
    lines = [dict(iter=i, loss=3.0 - 0.1 * i, lr=1e-4) for i in range(1, 11)]
    lines.append({'coco/bbox_mAP': box_ap, 'coco/bbox_mAP_50': 0.3,
                  'coco/segm_mAP': 0.1, 'coco/segm_mAP_50': 0.2, 'step': 2})
    (log_dir / 'scalars.json').write_text(
        '\n'.join(json.dumps(line) for line in lines) + '\n')


def test_report_only(tmp_path, capsys):
    for seed in (0, 1):
        for arm, box_ap in (('laplacian', 0.2), ('softmax', 0.1)):
            write_run(tmp_path, arm, seed, box_ap)
    runs = tool.main([
        '--report-only', '--seeds', '0', '1', '--arms', 'laplacian',
        'softmax', '--work-dir', str(tmp_path)
    ])
    out = capsys.readouterr().out
    assert len(runs) == 4 and len(runs[0]['curve']) == 10
    assert '| 0 | laplacian | 20.0 | 30.0 | 10.0 | 20.0 |' in out
    assert '| mean | softmax | 10.0 |' in out
    assert (tmp_path / 'loss_curves.png').stat().st_size > 1000


def test_read_run_keeps_training_loss_and_last_metrics(tmp_path):
    """mmengine's layout: training lines by ``iter``, validation by ``step``.

    The curve holds the training losses only, and each metric is its last
    value (a float, even when logged as an int).
    """

    def train(it, loss):
        return dict(lr=1e-4, data_time=0.01, loss=loss, loss_cls=loss / 2,
                    time=0.5, epoch=it // 5, iter=it, memory=100, step=it)

    def val(epoch, box_ap, segm_ap50):
        return {'coco/bbox_mAP': box_ap, 'coco/bbox_mAP_50': 0.4,
                'coco/segm_mAP': 0.1, 'coco/segm_mAP_50': segm_ap50,
                'data_time': 0.02, 'time': 0.3, 'step': epoch}

    path = tmp_path / 'scalars.json'
    lines = [train(5, 2.5), val(1, 0.1, 0.3), train(10, 2.0), val(2, 0.2, 0)]
    path.write_text('\n'.join(json.dumps(line) for line in lines) + '\n')
    run = tool.read_run(str(path))
    assert run['curve'] == [(5, 2.5), (10, 2.0)]
    assert run['metrics'] == {
        'coco/bbox_mAP': 0.2, 'coco/bbox_mAP_50': 0.4, 'coco/segm_mAP': 0.1,
        'coco/segm_mAP_50': 0.0
    }
    assert isinstance(run['metrics']['coco/segm_mAP_50'], float)
