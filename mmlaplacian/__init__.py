"""mmlaplacian: the LaplacianFormer backbone, its fused ops and the glue
that plugs it into OpenMMLab, timm and the export runtimes.

The core (:mod:`mmlaplacian.ops`, :mod:`mmlaplacian.models`) needs torch
only. The OpenMMLab adapter (the registries, datasets, hooks) is imported here
when mmengine is installed; the timm adapter
(``timm.create_model('laplacianformer_tiny', ...)``) together with timm,
which takes over a second to import, so processes that do not use timm do
not load it.
"""
import importlib.util

from .adapters.import_hooks import import_with
from .models import LaplacianAttention, LaplacianFormer, set_inference_mode
from .ops import laplace_kernel, newton_schulz_inverse
from .version import __version__

__all__ = [
    '__version__', 'laplace_kernel', 'newton_schulz_inverse',
    'LaplacianFormer', 'LaplacianAttention', 'set_inference_mode'
]

if importlib.util.find_spec('mmengine') is not None:
    from .adapters import openmmlab  # noqa: E402,F401
import_with('timm', 'mmlaplacian.adapters.timm_models')
