"""mmlaplacian: the LaplacianFormer backbone, its fused ops and the glue
that plugs it into OpenMMLab, timm and the export runtimes.

The core (:mod:`mmlaplacian.ops`, :mod:`mmlaplacian.models`) needs torch
only. ``import mmlaplacian`` also registers the backbone, hooks and datasets
with OpenMMLab when mmengine is installed. timm's models are registered by
``import mmlaplacian.adapters.timm_models``, as a timm model file registers
its own: timm takes over a second to import, which a process that never
uses it should not pay.
"""
import importlib.util

from .models import LaplacianAttention, LaplacianFormer
from .ops import laplace_kernel, newton_schulz_inverse
from .version import __version__

__all__ = [
    '__version__', 'laplace_kernel', 'newton_schulz_inverse',
    'LaplacianFormer', 'LaplacianAttention'
]

if importlib.util.find_spec('mmengine') is not None:
    from .adapters import openmmlab  # noqa: E402,F401
