"""kernel_ablation.py --report-only on hand-written mmengine scalar logs."""
import json


def write_run(work_dir, arm, seed, box_ap):
    log_dir = work_dir / f'{arm}_seed{seed}' / '20260101_000000' / 'vis_data'
    log_dir.mkdir(parents=True)
    lines = [dict(iter=i, loss=3.0 - 0.1 * i, lr=1e-4) for i in range(1, 11)]
    lines.append({'coco/bbox_mAP': box_ap, 'coco/bbox_mAP_50': 0.3,
                  'coco/segm_mAP': 0.1, 'coco/segm_mAP_50': 0.2, 'step': 2})
    (log_dir / 'scalars.json').write_text(
        '\n'.join(json.dumps(line) for line in lines) + '\n')


def test_report_only(load_tool, tmp_path, capsys):
    for seed in (0, 1):
        for arm, box_ap in (('laplacian', 0.2), ('softmax', 0.1)):
            write_run(tmp_path, arm, seed, box_ap)
    tool = load_tool('kernel_ablation')
    runs = tool.main([
        '--report-only', '--seeds', '0', '1', '--arms', 'laplacian',
        'softmax', '--work-dir', str(tmp_path)
    ])
    out = capsys.readouterr().out
    assert len(runs) == 4 and len(runs[0]['curve']) == 10
    assert '| 0 | laplacian | 20.0 | 30.0 | 10.0 | 20.0 |' in out
    assert '| mean | softmax | 10.0 |' in out
    assert (tmp_path / 'loss_curves.png').stat().st_size > 1000
