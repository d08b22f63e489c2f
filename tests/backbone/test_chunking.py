"""Chunking helpers: spans that cover every token, moments merged exactly."""
import torch

from mmlaplacian.models.layers.chunking import ColumnMoments, token_spans


def test_spans_cover_every_token_once():
    assert list(token_spans(10, 4)) == [(0, 4), (4, 8), (8, 10)]
    assert list(token_spans(10, 10)) == [(0, 10)]
    assert list(token_spans(3, 8)) == [(0, 3)]


def test_merged_moments_equal_two_pass_statistics():
    torch.manual_seed(0)
    values = torch.rand(2, 3, 1001, 7, dtype=torch.double) * 1e-3 + 0.5
    moments = None
    for start, end in token_spans(1001, 97):
        moments = ColumnMoments.of(values[..., start:end, :]).merge(moments)
    assert moments.count == 1001
    torch.testing.assert_close(moments.mean,
                               values.mean(-2, keepdim=True))
    # Offset 0.5, spread 1e-3: E[x²] − E[x]² would lose ~6 digits here.
    torch.testing.assert_close(
        moments.var,
        values.var(-2, keepdim=True, unbiased=False),
        rtol=1e-9,
        atol=0)
