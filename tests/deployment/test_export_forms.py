"""The export forms of the fused ops: standard-operator graphs that equal
the reference, chosen by the exported program's sizes, with nothing in the
model patched."""
import pytest
import torch

from mmlaplacian.ops import export_decompositions, laplace_kernel
from mmlaplacian.ops.export_forms import (FEATURE_SUMS, block_rows,
                                          laplace_kernel_per_feature,
                                          laplace_kernel_row_blocks)
from mmlaplacian.ops.reference import laplace_kernel_forward_reference


# (2, 3) leading dims, M = 7, d = 5: 210 elements per row. 37 rows:
# one-row blocks, 9 blocks of 4 and one of 1, a single block.
@pytest.mark.parametrize('max_elements, rows', [(1, 1), (210 * 4, 4),
                                                (210 * 37, 37)])
@pytest.mark.parametrize('feature_sum', FEATURE_SUMS)
def test_row_blocks_kernel_equals_reference(max_elements, rows, feature_sum):
    """Odd N, a row count that is no multiple of the block, one-row blocks
    and a single block, in float64, with either sum over the features."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 37, 5, dtype=torch.float64, generator=generator)
    y = torch.randn(2, 3, 7, 5, dtype=torch.float64, generator=generator)
    expected = laplace_kernel_forward_reference(x.reshape(6, 37, 5),
                                                y.reshape(6, 7, 5))
    assert block_rows(x, y, max_elements) == rows
    got = laplace_kernel_row_blocks(x, y, max_elements, feature_sum)
    assert got.shape == (2, 3, 37, 7)
    torch.testing.assert_close(got.reshape(6, 37, 7),
                               expected,
                               rtol=1e-12,
                               atol=1e-15)



@pytest.mark.parametrize('offset', [0., 1e3, -1e3])
def test_max_identity_keeps_float32_accuracy(offset):
    """``2 max(a, b) - a - b`` cancels terms as large as the inputs; centred
    on the landmarks' mean it stays as close to the float64 kernel as the
    direct ``|x - y|`` form, also when every feature sits far from zero."""
    generator = torch.Generator().manual_seed(0)
    x = offset + torch.randn(2, 300, 32, dtype=torch.float64,
                             generator=generator) / 4
    y = offset + torch.randn(2, 49, 32, dtype=torch.float64,
                             generator=generator) / 4
    expected = laplace_kernel_forward_reference(x, y)
    errors = {
        feature_sum: (laplace_kernel_row_blocks(
            x.float(), y.float(), 2**14, feature_sum).double() -
                      expected).abs().max().item()
        for feature_sum in ('matmul', 'max-matmul')
    }
    # At an offset of 1e3 both are off by the inputs' own float32 rounding
    # (2.6e-6); near zero by 4e-9.
    assert errors['max-matmul'] < 1e-5, errors
    assert errors['max-matmul'] <= 2 * errors['matmul'] + 1e-8, errors


def test_block_size_follows_the_budget():
    x, y = torch.empty(1, 2, 1000, 32), torch.empty(1, 2, 49, 32)
    assert block_rows(x, y, 2 * 49 * 32 * 10 + 5) == 10
    assert block_rows(x, y, 1) == 1


def test_per_feature_form_equals_reference_bit_for_bit():
    x = torch.randn(3, 37, 5, dtype=torch.float64)
    y = torch.randn(3, 7, 5, dtype=torch.float64)
    assert torch.equal(laplace_kernel_per_feature(x, y),
                       laplace_kernel_forward_reference(x, y))


class _KernelAndInverse(torch.nn.Module):
    """Both fused ops, as the attention uses them."""

    def forward(self, x, landmarks):
        from mmlaplacian.ops import newton_schulz_inverse
        eye = torch.eye(landmarks.shape[1], dtype=x.dtype)
        inverse = newton_schulz_inverse(
            laplace_kernel(landmarks, landmarks) + 0.01 * eye)
        return laplace_kernel(x, landmarks) @ inverse


def _call_targets(program):
    return [str(node.target) for node in program.graph.nodes
            if node.op == 'call_function']


@pytest.mark.parametrize('dynamic', [False, True], ids=['static', 'dynamic'])
def test_decompositions_leave_only_standard_operators(dynamic):
    """The exported program holds our operators; their export forms replace
    them (row blocks for static sizes, per-feature for symbolic ones) and the
    result equals eager, also at another size when dynamic."""
    torch.manual_seed(0)
    x, landmarks = torch.randn(2, 300, 8) / 4, torch.randn(2, 49, 8) / 4
    tokens = torch.export.Dim('tokens', min=50, max=5000)
    program = torch.export.export(
        _KernelAndInverse(), (x, landmarks),
        dynamic_shapes=({1: tokens}, None) if dynamic else None)
    assert any('mmlaplacian.laplace_kernel' in t
               for t in _call_targets(program))
    program = program.run_decompositions(
        export_decompositions(laplace='row-blocks',
                              max_elements=2 * 49 * 8 * 40)
        if not dynamic else export_decompositions())
    targets = _call_targets(program)
    assert not [t for t in targets if 'mmlaplacian' in t]
    abs_nodes = sum('aten.abs' in t for t in targets)
    # row-blocks: one |x - y| per block (300 tokens in 8 blocks of 40 or
    # fewer, and 2 for the 49 landmarks). Dynamic: per-feature, one per
    # feature (d = 8), for the symbolic kernel only; the landmark matrix
    # keeps static sizes, so 'auto' takes row blocks for it (one block at
    # the default budget). Newton-Schulz's norms and symmetry test add 3.
    assert abs_nodes == (8 + 1 if dynamic else 8 + 2) + 3
    check = torch.randn(2, 1000, 8) / 4 if dynamic else x
    torch.testing.assert_close(program.module()(check, landmarks),
                               _KernelAndInverse()(check, landmarks))


def test_row_blocks_form_refuses_symbolic_sizes():
    tokens = torch.export.Dim('tokens', min=50, max=5000)
    program = torch.export.export(
        _KernelAndInverse(),
        (torch.randn(2, 300, 8), torch.randn(2, 49, 8)),
        dynamic_shapes=({1: tokens}, None))
    with pytest.raises(ValueError, match='static sizes'):
        program.run_decompositions(
            export_decompositions(laplace='row-blocks'))
    with pytest.raises(ValueError, match='graph form'):
        export_decompositions(laplace='blocked')
    with pytest.raises(ValueError, match='feature sum'):
        export_decompositions(feature_sum='einsum')


@pytest.mark.parametrize('budget', [0, -4, 2.5, True, '1000'])
def test_block_budget_must_be_a_positive_integer(budget):
    with pytest.raises(ValueError, match='block budget.*positive integer'):
        export_decompositions(max_elements=budget)


def test_row_blocks_attention_in_onnxruntime(tmp_path):
    """A static export takes the row-blocks graph (several blocks here), has
    no per-feature loop, and matches PyTorch in onnxruntime."""
    pytest.importorskip('onnxruntime')
    pytest.importorskip('onnxscript')
    from mmlaplacian import LaplacianAttention
    from mmlaplacian.deployment import export_onnx, ort_run, ort_session

    from benchmarks.onnx_compare import compare_features

    class AttentionOnMap(torch.nn.Module):

        def __init__(self):
            super().__init__()
            self.attn = LaplacianAttention(32, num_heads=2)

        def forward(self, image):
            tokens = image.flatten(2).transpose(1, 2)
            return self.attn(tokens, tuple(image.shape[-2:]))

    torch.manual_seed(0)
    module = AttentionOnMap().eval()
    image = torch.randn(1,
                        32,
                        33,
                        35,
                        generator=torch.Generator().manual_seed(0))
    path = str(tmp_path / 'attention.onnx')
    # 1155 tokens, 2 * 49 * 16 elements per token: 8 blocks of 150 or fewer.
    result = export_onnx(module,
                         image,
                         path,
                         output_names=['tokens'],
                         block_elements=150 * 2 * 49 * 16)
    assert result.laplace == 'row-blocks'
    # One Abs per block and one for the landmark matrix (a single block),
    # plus Newton-Schulz's norms: the per-feature graph has d = 16 Abs per
    # kernel matrix, 32 for these two.
    assert result.operators['Abs'] < 2 * 16
    with torch.no_grad():
        expected = module(image)
    comparison = compare_features(ort_run(ort_session(path), image),
                                  [expected])
    assert comparison.ok, comparison.lines(['tokens'])
