"""Fused ops of mmlaplacian: the Laplacian kernel and Newton–Schulz inverse.

Each op is a PyTorch operator (``torch.ops.mmlaplacian.*``) declared by the
compiled extension ``mmlaplacian._ext`` together with its C++ (CPU) and CUDA
kernels, or by :mod:`.extension` when it is not built; a fake kernel, a
registered analytic backward, standard-operator export forms
(:mod:`.export_forms`) and a pure-PyTorch reference, the kernel of devices
without a compiled one and ``impl='pytorch'``. Needs torch only.
"""
from .extension import ext_info
from .laplace_kernel import laplace_kernel, laplace_kernel_reference
from .newton_schulz import newton_schulz_inverse, newton_schulz_reference
from .export_forms import (LAPLACE_FORMS, export_decompositions,  # noqa: I001
                           laplace_kernel_row_blocks)

__all__ = [
    'laplace_kernel', 'laplace_kernel_reference', 'newton_schulz_inverse',
    'newton_schulz_reference', 'ext_info', 'export_decompositions',
    'laplace_kernel_row_blocks', 'LAPLACE_FORMS'
]
