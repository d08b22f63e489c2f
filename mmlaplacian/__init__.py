"""mmlaplacian: the LaplacianFormer backbone, its fused ops and the glue
that plugs it into OpenMMLab, timm and the export runtimes.

The core (:mod:`mmlaplacian.ops`, :mod:`mmlaplacian.models`) needs torch
only. Each adapter is imported when its framework is installed: OpenMMLab
(mmengine present: the registries, datasets, hooks) and timm
(``timm.create_model('laplacianformer_tiny', ...)``).
"""
import importlib.util

from .models import LaplacianAttention, LaplacianFormer, set_inference_mode
from .ops import laplace_kernel, newton_schulz_inverse
from .version import __version__

__all__ = [
    '__version__', 'laplace_kernel', 'newton_schulz_inverse',
    'LaplacianFormer', 'LaplacianAttention', 'set_inference_mode'
]

if importlib.util.find_spec('mmengine') is not None:
    from .adapters import openmmlab  # noqa: E402,F401
if importlib.util.find_spec('timm') is not None:
    from .adapters import timm_models  # noqa: E402,F401
