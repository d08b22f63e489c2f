"""benchmarks.detector_stages: a two-stage detector's time split into its
networks and host steps, eager and ExecuTorch side by side."""
import pytest

pytest.importorskip('executorch')

from benchmarks import detector_stages as tool  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def test_mask_rcnn_stages_add_up_to_the_total(tmp_path, capsys):
    status = tool.main([
        '--model', 'mask_rcnn', '--shape', '64x64', '--runtimes', 'eager',
        'executorch-operator-fp32', '--passes', '2', '--threads', '1',
        '--work-dir', str(tmp_path)
    ])
    assert status == 0
    assert (tmp_path / 'mask_rcnn_64x64.fp32.operator.dense.pte').is_file()
    lines = [line.strip('|').split('|')
             for line in capsys.readouterr().out.splitlines()
             if line.startswith('| ')]
    assert [c.strip() for c in lines[0]] == [
        'stage', 'eager', 'executorch-operator-fp32']
    rows = {cells[0].strip(): [c.strip() for c in cells[1:]]
            for cells in lines[1:]}
    eager_count, program_count = rows.pop('detections (count)')
    assert int(eager_count) == int(program_count) > 0
    for column in (0, 1):
        ms = {stage: float(cells[column]) for stage, cells in rows.items()}
        for stage in ('dense', 'RoI Align', 'box head', 'mask head',
                      'paste masks'):
            assert ms[stage] > 0, stage
        # Medians of parts need not add up exactly; each pass's do.
        parts = sum(v for stage, v in ms.items() if stage != 'total')
        assert parts == pytest.approx(ms['total'], rel=0.25)
