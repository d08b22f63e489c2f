"""The export-friendly shape arithmetic of the landmarks gives what the
eager formulas give: the same grid, the same pooling."""
import pytest
import torch
import torch.nn.functional as F

from mmlaplacian.models.layers import landmarks


@pytest.mark.parametrize('num_landmarks', [16, 49, 64])
def test_symbolic_grid_formula_equals_eager_grid(num_landmarks):
    """The integer formula used for symbolic sizes gives the eager grid."""
    sizes = [(h, w) for h in range(1, 130) for w in range(1, 130)]
    # Detection-sized grids too (stride 4 of up to 12,000 pixels).
    sizes += torch.randint(
        1, 3000, (3000, 2),
        generator=torch.Generator().manual_seed(0)).tolist()
    checked = 0
    for height, width in sizes:
        if height * width <= num_landmarks:
            continue  # the tokens themselves are the landmarks
        got = landmarks._symbolic_grid(height, width, num_landmarks)
        assert got == landmarks.landmark_grid((height, width),
                                              num_landmarks), (height, width)
        checked += 1
    assert checked > 15000


def test_sizes_known_equal():
    assert landmarks.sizes_known_equal((3, 4), (3, 4))
    assert not landmarks.sizes_known_equal((3, 4), (3, 5))
    assert not landmarks.sizes_known_equal((3, 4), (3, ))


@pytest.mark.parametrize('shape,grid',
                         [((25, 42), (5, 9)), ((200, 336), (5, 9)),
                          ((7, 300), (1, 49)), ((40, 17), (10, 4))])
def test_pooling_matrices_equal_adaptive_pooling(shape, grid):
    x = torch.randn(2, 8, *shape, generator=torch.Generator().manual_seed(0))
    rows = landmarks.pooling_matrix(shape[0], grid[0], x)
    cols = landmarks.pooling_matrix(shape[1], grid[1], x)
    pooled = rows @ x @ cols.transpose(0, 1)
    torch.testing.assert_close(pooled,
                               F.adaptive_avg_pool2d(x, grid),
                               rtol=1e-5,
                               atol=1e-6)
    # Every position belongs to a bin, and the bins' weights sum to 1.
    torch.testing.assert_close(rows.sum(1), torch.ones(grid[0]))
    assert (rows > 0).any(0).all()


@pytest.mark.parametrize('shape,grid',
                         [((25, 42), (5, 9)), ((7, 300), (1, 49)),
                          ((40, 17), (10, 4)), ((3, 5), (2, 2))])
def test_pooling_by_products_equals_adaptive_pooling_of_tokens(shape, grid):
    """The traced form of the landmark pooling (products on the tokens as
    they lie) gives the eager one's landmarks, also for tokens that are a
    strided view."""
    generator = torch.Generator().manual_seed(0)
    batch, channels = 2, 12
    wide = torch.randn(batch, shape[0] * shape[1], 2 * channels,
                       generator=generator)
    tokens = wide[..., ::2]  # non-contiguous
    got = landmarks._pool_by_products(tokens, shape, grid)
    expected = landmarks.pool_landmarks(tokens, shape, grid, num_heads=1)
    assert got.shape == (batch, grid[0] * grid[1], channels)
    torch.testing.assert_close(got, expected[:, 0], rtol=1e-5, atol=1e-6)


def test_pooling_by_products_gradcheck():
    tokens = torch.randn(2, 7 * 5, 3, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda t: landmarks._pool_by_products(t, (7, 5), (3, 2)), (tokens, ))


@pytest.mark.parametrize('dynamic', [False, True])
def test_compiled_landmark_pooling_equals_eager(dynamic):
    """``torch.compile`` takes the product form (static or symbolic sizes);
    its landmarks are eager's."""
    tokens = torch.randn(1, 50 * 84, 64,
                         generator=torch.Generator().manual_seed(0))
    grid = landmarks.landmark_grid((50, 84), 49)
    compiled = torch.compile(landmarks.pool_landmarks, dynamic=dynamic,
                             fullgraph=True)
    torch.testing.assert_close(compiled(tokens, (50, 84), grid, 2),
                               landmarks.pool_landmarks(
                                   tokens, (50, 84), grid, 2),
                               rtol=1e-5, atol=1e-6)
