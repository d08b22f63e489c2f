"""benchmarks.mac_rate: MACs per second against the GEMM rates."""
import json
from pathlib import Path

import pytest
import torch

from benchmarks import mac_rate as tool

NARROW = str(Path(__file__).parents[1] / 'detection' / 'configs' /
             'retinanet_synthetic.py')


def test_int8_gemm_is_the_exact_integer_product():
    passes = tool.gemm_passes(64)
    product = passes['int8 GEMM']()
    assert product.dtype == torch.int32
    # The same seeded matrices, multiplied exactly in int32.
    generator = torch.Generator().manual_seed(0)
    for _ in range(2):
        torch.randn(64, 64, generator=generator)
    a8, b8 = (torch.randint(-128, 128, (64, 64), dtype=torch.int8,
                            generator=generator) for _ in range(2))
    assert torch.equal(product, a8.int() @ b8.int())


def test_rates_are_measured_and_tabled(tmp_path, capsys):
    results = tool.main([
        '--models', NARROW, '--size', '64x96', '--variants', 'eager',
        '--gemm-size', '128', '--threads', '1', '--repeat', '2', '--out-dir',
        str(tmp_path)
    ])
    assert [r['status'] for r in results] == ['ok'], results
    result = results[0]
    assert result['macs'] > 0
    rates = result['rates']
    assert set(rates) == {'fp32 GEMM', 'int8 GEMM', 'eager'}
    assert rates['fp32 GEMM']['macs_per_second'] == pytest.approx(
        128**3 / rates['fp32 GEMM']['seconds'])
    assert rates['eager']['macs_per_second'] == pytest.approx(
        result['macs'] / rates['eager']['seconds'])
    out = capsys.readouterr().out
    assert '| eager: s, GMAC/s (share) |' in out
    assert json.loads((tmp_path / 'results.json').read_text()) == results
    assert (tmp_path / 'mac_rate.md').read_text() in out


def test_executorch_programs_are_lowered_once_and_rated(tmp_path):
    """The ExecuTorch variants lower the backbone (int8 calibrated on the
    given images), keep the programs, and rate them like the others."""
    pytest.importorskip('executorch')
    from mmlaplacian.synthetic_data.instances import make_synthetic_coco
    images = tmp_path / 'coco'
    make_synthetic_coco(str(images), num_train=8, num_val=1, image_size=96)
    args = [
        '--models', NARROW, '--size', '64x96', '--variants',
        'eager,executorch-fp32,executorch-int8', '--gemm-size', '128',
        '--threads', '1', '--repeat', '2', '--calibration-images',
        str(images / 'train'), '--out-dir',
        str(tmp_path)
    ]
    results = tool.main(args)
    assert [r['status'] for r in results] == ['ok'], results
    rates = results[0]['rates']
    for variant in ('executorch-fp32', 'executorch-int8'):
        assert rates[variant]['macs_per_second'] == pytest.approx(
            results[0]['macs'] / rates[variant]['seconds'])
        program = tmp_path / f'retinanet_synthetic_64x96.{variant[11:]}.pte'
        assert program.is_file()
    # A second run takes the programs as they are.
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.glob('*.pte')}
    assert [r['status'] for r in tool.main(args)] == ['ok']
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob('*.pte')} == stamps


def test_a_model_that_failed_keeps_its_row_in_the_table():
    """A failed model (its program did not load) is a row of the table
    beside the models that ran, with its status and message."""
    timed = {'seconds': 0.5, 'macs_per_second': 2e9, 'disturbed': False}
    variants = ['eager', 'executorch-int8']
    ran = dict(model='lf_tiny', status='ok', variants=variants,
               size=[64, 96], threads=1, repeat=2, allocator='default',
               gemm_size=128, macs=1e9, load_before=0.5, load_after=0.7,
               rates={name: dict(timed) for name in
                      ['fp32 GEMM', 'int8 GEMM'] + variants})
    failed = dict(model='swin_t', status='error', variants=variants,
                  message='Failed to load method forward')
    table = tool.format_table([ran, failed])
    rows = [line for line in table.splitlines() if line.startswith('|')]
    assert len({row.count('|') for row in rows}) == 1, rows
    assert rows[-1].startswith('| Swin-T | error | Failed to load method')


def test_the_aoti_package_is_a_variant():
    assert tool.parse_args(['--variants', 'eager,aoti+freezing']).variants == [
        'eager', 'aoti+freezing']


def test_unknown_variant_is_refused(capsys):
    with pytest.raises(SystemExit):
        tool.parse_args(['--variants', 'eager,onnx'])
    assert "unknown variants ['onnx']" in capsys.readouterr().err
