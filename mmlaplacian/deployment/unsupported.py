"""Modules without a standard-ONNX export path, found before exporting.

A failed export deep inside the exporter names an operator, not the part of
the config to change; this check names the module and says what to do.
"""
from __future__ import annotations

import torch.nn as nn

# mmcv modules whose forward runs a compiled mmcv op with no standard ONNX
# operator (exporting them needs mmdeploy's custom-op library).
_MMCV_CUSTOM_OPS = ('DeformConv2d', 'ModulatedDeformConv2d',
                    'DeformConv2dPack', 'ModulatedDeformConv2dPack',
                    'MultiScaleDeformableAttention', 'CARAFE', 'CARAFEPack',
                    'DeformRoIPool', 'CornerPool', 'PSAMask', 'MaskedConv2d')


class ExportUnsupportedError(ValueError):
    """A model part cannot be exported to standard ONNX operators; the
    message names the module (its path in the model) and the reason."""


def check_exportable(model: nn.Module) -> None:
    """Raise :class:`ExportUnsupportedError` for the first module of
    ``model`` that has no standard-ONNX path.

    Raises:
        ExportUnsupportedError: Names the module path, its type and the fix.
    """
    from mmlaplacian.models.layers import LaplacianAttention

    for name, module in model.named_modules():
        kind = type(module).__name__
        if kind in _MMCV_CUSTOM_OPS:
            raise ExportUnsupportedError(
                f'{name} ({kind}) cannot be exported: it runs an mmcv '
                f'compiled op that has no standard ONNX operator; replace it '
                f'in the config (e.g. a plain convolution)')
        if isinstance(module,
                      LaplacianAttention) and module.inverse != 'newton':
            raise ExportUnsupportedError(
                f'{name} ({kind}, inverse={module.inverse!r}) cannot be '
                f'exported: the exact inverse (torch.linalg.inv) has no '
                f'standard ONNX operator; use inverse="newton" (Newton-Schulz '
                f'exports as matrix products)')
