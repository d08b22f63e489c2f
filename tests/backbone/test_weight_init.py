"""The core initialises as mmengine does."""
import torch
from mmengine.model import weight_init

from mmlaplacian.models.utils.weight_init import trunc_normal_


def test_truncated_normal_draws_mmengines_values():
    """The core's truncated normal draws mmengine's values for a seed, so
    models initialised from scratch (the quick starts) are unchanged."""
    ours, theirs = torch.empty(4096), torch.empty(4096)
    torch.manual_seed(0)
    trunc_normal_(ours, std=.02)
    torch.manual_seed(0)
    weight_init.trunc_normal_(theirs, std=.02)
    assert torch.equal(ours, theirs)
