"""Fused ops of mmlaplacian: the Laplacian kernel and Newton–Schulz inverse.

Each op is a PyTorch operator (``torch.ops.mmlaplacian.*``) with compiled
kernels from ``mmlaplacian._ext`` registered per dispatch key (C++ for the
CPU, CUDA when built with it), a fake kernel, a registered analytic
backward, standard-operator export forms (:mod:`.export_forms`) and a
pure-PyTorch reference behind ``impl='pytorch'``. Needs torch only.
"""
from .ext_loader import ext_info
from .laplace_kernel import laplace_kernel, laplace_kernel_reference
from .newton_schulz import newton_schulz_inverse, newton_schulz_reference
from .export_forms import (LAPLACE_FORMS, export_decompositions,  # noqa: I001
                           laplace_kernel_chunked)

__all__ = [
    'laplace_kernel', 'laplace_kernel_reference', 'newton_schulz_inverse',
    'newton_schulz_reference', 'ext_info', 'export_decompositions',
    'laplace_kernel_chunked', 'LAPLACE_FORMS'
]
