"""mmlaplacian: the LaplacianFormer backbone for OpenMMLab detection."""
import importlib.util

from .ops import laplace_kernel, newton_schulz_inverse
from .utils import install_mmengine_checkpoint_fix
from .version import __version__

__all__ = ['__version__', 'laplace_kernel', 'newton_schulz_inverse']

# The fused ops need only torch; the models need mmengine. Without mmengine
# (an ops-only environment such as a bare GPU test machine) skip the models.
if importlib.util.find_spec('mmengine') is not None:
    # mmengine 0.10.x cannot load its own checkpoints under torch >= 2.6
    # (the weights-only default); fix it for every user of the package.
    install_mmengine_checkpoint_fix()
    from . import engine  # noqa: E402,F401  (registers the CPU AMP wrapper)
    # Registers CheckedCocoDataset, which the detection configs use.
    from . import datasets  # noqa: E402,F401
    from .models import LaplacianAttention, LaplacianFormer  # noqa: E402
    __all__ += ['LaplacianFormer', 'LaplacianAttention']
    # timm.create_model('laplacianformer_tiny', ...) once timm is present.
    if importlib.util.find_spec('timm') is not None:
        from .adapters import timm_models  # noqa: E402,F401
