"""benchmarks.compiled_speed: eager and inductor variants, side by side."""
import json
import re
from pathlib import Path

import pytest
import torch
from torch._inductor.utils import run_and_get_code

from benchmarks import compiled_speed as tool

# The narrow LaplacianFormer of the test configs (one block per stage):
# every layer of LaplacianFormer-T, compiled in a fraction of its time.
NARROW = str(Path(__file__).parents[1] / 'detection' / 'configs' /
             'retinanet_synthetic.py')


def run_narrow(tmp_path, mode, *options, expected=None):
    results = tool.main([
        '--model', NARROW, '--modes', mode, '--sizes', '64x96',
        '--threads', '1', '--repeat', '2', '--warmup', '0', '--retries', '0',
        '--out-dir', str(tmp_path), *options
    ])
    assert [r['status'] for r in results] == ['ok'], results
    variants = results[0]['variants']
    assert list(variants) == (expected or list(tool.VARIANTS[mode]))
    for variant in variants.values():
        assert len(variant['times']) == 2 and variant['seconds'] > 0
    saved = json.loads((tmp_path / 'results.json').read_text())
    assert saved == results
    return variants


# Inductor compiles each variant for minutes on two shared cores (its C++
# kernels are built afresh when its cache is cold).
@pytest.mark.timeout(1200)
def test_forward_variants_are_compiled_timed_and_tabled(tmp_path, capsys):
    onednn = 'inductor+freezing+onednn-linear'
    variants = run_narrow(tmp_path, 'fwd', '--profile', '--onednn-linear',
                          expected=[*tool.VARIANTS['fwd'], onednn])
    for name in ('inductor', 'inductor+freezing', onednn):
        # The compiled forward computes eager's outputs.
        assert variants[name]['max_abs_diff'] < 1e-4, name
        # Inductor's own kernels are told apart from the eager ones.
        assert variants[name]['time_shares']['generated kernels'] > 0, name
    shares = variants['eager']['time_shares']
    assert shares['generated kernels'] == 0
    assert shares['GEMMs'] > 0 and shares['our operators'] > 0
    assert sum(shares.values()) == pytest.approx(1)
    out = capsys.readouterr().out
    assert '| fwd | 64×96 | inductor+freezing |' in out
    assert f'| fwd | 64×96 | {onednn} |' in out
    assert 'by kind of kernel' in out
    assert (tmp_path / 'compiled_speed.md').read_text() in out


# The backward as well: twice the compilation.
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_training_step_is_compiled_and_timed(tmp_path, capsys):
    variants = run_narrow(tmp_path, 'train')
    assert variants['inductor']['max_abs_diff'] is None
    assert '| train | 64×96 | inductor |' in capsys.readouterr().out


def test_train_runs_only_up_to_the_pixel_limit():
    args = tool.parse_args(['--sizes', '64x64', '800x1344', '1600x2688'])
    assert [(s['mode'], s['size']) for s in tool.cases(args)] == [
        ('fwd', [64, 64]), ('fwd', [800, 1344]), ('fwd', [1600, 2688]),
        ('train', [64, 64]), ('train', [800, 1344])]


def test_unknown_mode_is_refused(capsys):
    with pytest.raises(SystemExit):
        tool.parse_args(['--modes', 'fwd,infer'])
    assert "unknown modes ['infer']" in capsys.readouterr().err


# bfloat16 autocast, as tools/test.py --amp runs the backbone: each variant
# again, its speed-up against eager in bfloat16.
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_bfloat16_variants_are_timed_against_both_eagers(tmp_path, capsys):
    results = tool.main([
        '--model', NARROW, '--modes', 'fwd', '--sizes', '64x96',
        '--precisions', 'fp32', 'bf16', '--threads', '1', '--repeat', '1',
        '--warmup', '0', '--retries', '0', '--out-dir', str(tmp_path)
    ])
    assert [r['status'] for r in results] == ['ok'], results
    variants = results[0]['variants']
    assert list(variants) == [
        'eager', 'inductor', 'inductor+freezing', 'eager+bf16',
        'inductor+bf16', 'inductor+freezing+bf16']
    for name, variant in variants.items():
        error = variant['relative_error']
        # float32 variants compute eager's outputs; bfloat16 ones keep 8
        # bits of mantissa in the products, our operators in float32.
        assert error < (5e-2 if name.endswith('+bf16') else 1e-5), name
    assert variants['eager+bf16']['relative_error'] > 1e-4
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith('| fwd | 64×96 | inductor+bf16 |'))
    cells = [c.strip() for c in row.split('|')[1:-1]]
    bf16, fp32 = (variants[f'eager{s}']['seconds'] for s in ('+bf16', ''))
    seconds = variants['inductor+bf16']['seconds']
    assert cells[4] == f'{bf16 / seconds:.2f}×'
    assert cells[5] == f'{fp32 / seconds:.2f}×'


def test_precisions_name_the_variants():
    assert tool.variant_names('train', ['fp32', 'bf16']) == [
        'eager', 'inductor', 'eager+bf16', 'inductor+bf16']
    spec = tool.cases(tool.parse_args(['--sizes', '64x64', '--modes', 'fwd',
                                       '--precisions', 'bf16']))[0]
    assert spec['precisions'] == ['bf16']


def test_max_autotune_adds_a_forward_variant():
    assert tool.variant_names('fwd', ['fp32'], max_autotune=True) == [
        'eager', 'inductor', 'inductor+freezing', 'inductor+max-autotune']
    assert tool.variant_names('fwd', ['fp32'], chunked=True)[-1] == (
        'inductor+freezing+chunked')
    assert tool.variant_names('train', ['fp32'], max_autotune=True,
                              chunked=True) == ['eager', 'inductor']


def test_onednn_linear_repeats_the_float32_freezing_variants():
    assert tool.variant_names('fwd', ['fp32', 'bf16'], chunked=True,
                              onednn_linear=True) == [
        'eager', 'inductor', 'inductor+freezing', 'inductor+freezing+chunked',
        'inductor+freezing+onednn-linear',
        'inductor+freezing+chunked+onednn-linear', 'eager+bf16',
        'inductor+bf16', 'inductor+freezing+bf16',
        'inductor+freezing+chunked+bf16']
    # In bfloat16 inductor packs for oneDNN anyway; training never freezes.
    assert tool.variant_names('fwd', ['bf16'], onednn_linear=True) == [
        'eager+bf16', 'inductor+bf16', 'inductor+freezing+bf16']
    # Precisions in the order given.
    assert tool.variant_names('train', ['bf16', 'fp32'],
                              onednn_linear=True) == [
        'eager+bf16', 'inductor+bf16', 'eager', 'inductor']
    assert tool.variant_names('train', ['fp32'], onednn_linear=True) == [
        'eager', 'inductor']


def test_dynamic_adds_one_forward_variant_without_a_repacked_copy():
    assert tool.variant_names('fwd', ['fp32'], dynamic=True,
                              onednn_linear=True) == [
        'eager', 'inductor', 'inductor+freezing', tool.DYNAMIC,
        'inductor+freezing+onednn-linear']
    assert tool.variant_names('fwd', ['bf16'], dynamic=True)[-1] == (
        tool.DYNAMIC + '+bf16')
    assert tool.variant_names('train', ['fp32'], dynamic=True) == [
        'eager', 'inductor']
    spec = tool.cases(tool.parse_args(['--sizes', '64x64', '--dynamic']))[0]
    assert spec['dynamic'] is True


def test_aoti_adds_one_float32_forward_variant():
    assert tool.variant_names('fwd', ['fp32', 'bf16'], aoti=True,
                              onednn_linear=True) == [
        'eager', 'inductor', 'inductor+freezing', tool.AOTI,
        'inductor+freezing+onednn-linear', 'eager+bf16', 'inductor+bf16',
        'inductor+freezing+bf16']
    assert tool.variant_names('train', ['fp32'], aoti=True) == [
        'eager', 'inductor']
    spec = tool.cases(tool.parse_args(['--sizes', '64x64', '--aoti']))[0]
    assert spec['aoti'] is True


def _frozen_linear_code(dynamic: bool) -> str:
    """Inductor's code for a frozen float32 Linear-GELU."""
    torch.manual_seed(0)
    layer = torch.nn.Sequential(torch.nn.Linear(16, 32),
                                torch.nn.GELU()).eval()
    x = torch.randn(24, 16)
    torch._dynamo.reset()
    run = torch.compile(layer, dynamic=dynamic, options={'freezing': True})
    with torch.no_grad(), torch._inductor.config.patch(freezing=True):
        out, code = run_and_get_code(run, x)
        torch.testing.assert_close(out, layer(x))
    torch._dynamo.reset()
    return '\n'.join(code)


def test_symbolic_sizes_pack_float32_linears_for_onednn():
    """What the dynamic variant rests on: with a symbolic row count
    inductor's freezing packs a float32 linear for oneDNN, with its GELU as a
    post-op; with a fixed one for MKL."""
    if not torch.backends.mkldnn.is_available():
        pytest.skip('this torch has no oneDNN')
    assert re.search(r"mkldnn\._linear_pointwise\.default\([^)]*'gelu'",
                     _frozen_linear_code(dynamic=True))
    assert '_mkl_linear' in _frozen_linear_code(dynamic=False)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_dynamic_variant_computes_eagers_outputs(tmp_path):
    variants = run_narrow(tmp_path, 'fwd', '--dynamic',
                          expected=[*tool.VARIANTS['fwd'], tool.DYNAMIC])
    assert variants[tool.DYNAMIC]['max_abs_diff'] < 1e-4


@pytest.mark.slow
def test_aoti_variant_computes_eagers_outputs(tmp_path):
    variants = run_narrow(tmp_path, 'fwd', '--aoti',
                          expected=[*tool.VARIANTS['fwd'], tool.AOTI])
    assert variants[tool.AOTI]['max_abs_diff'] < 1e-4
    # The first call exported and compiled the package.
    assert variants[tool.AOTI]['first_call_seconds'] > 1
