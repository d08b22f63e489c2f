"""Fused ops of mmlaplacian: the Laplacian kernel and Newton–Schulz inverse.

Each op has compiled kernels in ``mmlaplacian._ext`` (C++ for CPU, CUDA when
built with it) and a pure-PyTorch reference; ``impl='auto'`` uses the
kernels when they are built for the tensor's device.
"""
from .ext_loader import ext_info
from .laplace_kernel import laplace_kernel, laplace_kernel_reference
from .newton_schulz import newton_schulz_inverse, newton_schulz_reference

__all__ = [
    'laplace_kernel', 'laplace_kernel_reference', 'newton_schulz_inverse',
    'newton_schulz_reference', 'ext_info'
]
