"""mmlaplacian: the LaplacianFormer backbone for OpenMMLab detection."""
from .utils import install_mmengine_checkpoint_fix
from .version import __version__

# mmengine 0.10.x cannot load its own checkpoints under torch >= 2.6 (the
# weights-only default); fix it for every user of the package.
install_mmengine_checkpoint_fix()

from .models import LaplacianAttention, LaplacianFormer  # noqa: E402
from .ops import laplace_kernel, newton_schulz_inverse  # noqa: E402

__all__ = [
    '__version__', 'LaplacianFormer', 'LaplacianAttention', 'laplace_kernel',
    'newton_schulz_inverse'
]
