"""Each output map of the backbone sits where the image is.

Changing a small patch of the image must change every output map most at
the cells over that patch. Exact shift-equivariance does not hold (the
absolute position embeddings and the global landmarks see the whole
image), but the convolutions, the depthwise conv on V and each token's
residual path are local, so the largest change stays at the patch. A
mirrored, transposed or shifted map moves it elsewhere. The patches sit
near the corners and off the diagonal, so that each such misplacement
moves at least one of them by two cells or more on some stage.
"""
import pytest
import torch

from mmlaplacian.models import LaplacianFormer

SIZE = 128
PATCH = 8
STRIDES = (4, 8, 16, 32)
# Top-left pixel of each patch: centred in a cell of the 4 x 4 stride-32
# grid (so "the matching cell" is unambiguous on every stage), in three
# corners and off the diagonal.
PATCHES = [(12, 12), (12, 108), (108, 44), (76, 108), (44, 76)]


def backbone(seed: int, mode: str) -> LaplacianFormer:
    torch.manual_seed(seed)
    model = LaplacianFormer(
        'tiny', drop_path_rate=0., attn_cfg=dict(mode=mode, chunk_tokens=256))
    model.init_weights()
    return model.eval()


def change_maps(model, image):
    """Per patch and stage, the (h, w) map of |change| summed over channels
    when that patch is painted over with other random values (one batch:
    the image, then each edit)."""
    g = torch.Generator().manual_seed(7)
    edited = image.repeat(len(PATCHES) + 1, 1, 1, 1)
    for index, (top, left) in enumerate(PATCHES, 1):
        edited[index, :, top:top + PATCH, left:left + PATCH] = torch.rand(
            3, PATCH, PATCH, generator=g)
    with torch.no_grad():
        outs = model(edited)
    return [[(out[index] - out[0]).abs().sum(0) for out in outs]
            for index in range(1, len(PATCHES) + 1)]


def near_over_far(change, top, left, stride):
    """Largest change within one cell of the patch's cells over the largest
    change further away (> 1: the change is largest near the patch).

    One cell of slack: a patch border on a cell edge of the finer maps is
    blurred across it by 3 x 3 convs, and on the 4 x 4 stride-32 map the
    softmax attention of stage 4 mixes neighbours strongly at random init.
    """
    rows = torch.arange(change.shape[0])[:, None]
    cols = torch.arange(change.shape[1])[None]
    first_row, last_row = top // stride, (top + PATCH - 1) // stride
    first_col, last_col = left // stride, (left + PATCH - 1) // stride
    cells_off = torch.maximum(
        torch.maximum(first_row - rows, rows - last_row),
        torch.maximum(first_col - cols, cols - last_col))
    return (change[cells_off <= 1].max() / change[cells_off > 1].max()).item()


# The full form (training, export) and the chunked form that runs on the
# CPU without autograd, whose chunks of 256 tokens split every stage-1 map
# in four.
# Measured (full form, seeds 0-2): the worst ratio per stride 4/8/16/32 was
# 2.4 / 13 / 5.0 / 3.7, and 2.4 / 65 / 28 / 9.4 for a backbone trained
# inside Mask R-CNN (the detection tests' 40 iterations); mirrored,
# transposed and rolled-by-2-cells maps gave at most 0.39.
@pytest.mark.parametrize('mode', ['full', 'chunked'])
@pytest.mark.parametrize('seed', [0, 1, 2])
def test_a_changed_patch_changes_each_map_most_at_its_cells(seed, mode):
    model = backbone(seed, mode)
    image = torch.rand(1, 3, SIZE, SIZE,
                       generator=torch.Generator().manual_seed(100 + seed))
    misplaced = {}
    for (top, left), changes in zip(PATCHES, change_maps(model, image)):
        for stride, change in zip(STRIDES, changes):
            assert change.shape == (SIZE // stride, SIZE // stride)
            ratio = near_over_far(change, top, left, stride)
            if not ratio > 1:
                misplaced[f'patch ({top}, {left}), stride {stride}'] = ratio
    assert not misplaced, (
        'largest change away from the patch (near / far):', misplaced)
