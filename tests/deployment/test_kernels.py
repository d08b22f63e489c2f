"""The chunked Laplacian kernel of the export path equals the reference."""
import pytest
import torch

from mmlaplacian.deployment.kernels import (chunk_tokens, laplace_graph,
                                            laplace_kernel_chunked)
from mmlaplacian.ops.reference import laplace_kernel_forward_reference


# (2, 3) leading dims, M = 7, d = 5: 210 elements per token. 37 tokens:
# one-token chunks, 9 chunks of 4 and one of 1, a single chunk.
@pytest.mark.parametrize('max_elements, tokens', [(1, 1), (210 * 4, 4),
                                                  (210 * 37, 37)])
def test_chunked_kernel_equals_reference(max_elements, tokens):
    """Odd N, a token count that is no multiple of the chunk, one-token
    chunks and a single chunk, in float64."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 37, 5, dtype=torch.float64, generator=generator)
    y = torch.randn(2, 3, 7, 5, dtype=torch.float64, generator=generator)
    expected = laplace_kernel_forward_reference(x.reshape(6, 37, 5),
                                                y.reshape(6, 7, 5))
    assert chunk_tokens(x, y, max_elements) == tokens
    got = laplace_kernel_chunked(x, y, max_elements)
    assert got.shape == (2, 3, 37, 7)
    torch.testing.assert_close(got.reshape(6, 37, 7),
                               expected,
                               rtol=1e-12,
                               atol=1e-15)


def test_chunk_size_follows_the_budget():
    x, y = torch.empty(1, 2, 1000, 32), torch.empty(1, 2, 49, 32)
    assert chunk_tokens(x, y, 2 * 49 * 32 * 10 + 5) == 10
    assert chunk_tokens(x, y, 1) == 1


def test_laplace_graph_switches_attention_only_inside_the_context():
    from mmlaplacian import LaplacianAttention
    from mmlaplacian.models.layers import laplacian_attention
    original = laplacian_attention.kernel_matrix
    torch.manual_seed(0)
    attn = LaplacianAttention(32, num_heads=2, impl='pytorch').double().eval()
    tokens = torch.randn(1, 15 * 17, 32, dtype=torch.float64)
    with torch.no_grad():
        expected = attn(tokens, (15, 17))
        with laplace_graph('chunked', max_elements=2 * 49 * 16 * 8):
            assert laplacian_attention.kernel_matrix is not original
            got = attn(tokens, (15, 17))
    assert laplacian_attention.kernel_matrix is original
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match='chunked'):
        with laplace_graph('blocked'):
            pass


def test_chunked_attention_in_onnxruntime(tmp_path):
    """A static export takes the chunked graph (several chunks here), has
    no per-feature loop, and matches PyTorch in onnxruntime."""
    pytest.importorskip('onnxruntime')
    pytest.importorskip('onnxscript')
    from mmlaplacian import LaplacianAttention
    from mmlaplacian.deployment import (compare_features, export_onnx, ort_run,
                                        ort_session)

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
    # 1155 tokens, 2 * 49 * 16 elements per token: 8 chunks of 150 or fewer.
    result = export_onnx(module,
                         image,
                         path,
                         output_names=['tokens'],
                         chunk_elements=150 * 2 * 49 * 16)
    assert result.laplace == 'chunked'
    # One Abs per chunk and one for the landmark matrix (a single chunk),
    # plus Newton-Schulz's norms: the per-feature graph has d = 16 Abs per
    # kernel matrix, 32 for these two.
    assert result.operators['Abs'] < 2 * 16
    with torch.no_grad():
        expected = module(image)
    comparison = compare_features(ort_run(ort_session(path), image),
                                  [expected])
    assert comparison.ok, comparison.lines(['tokens'])
