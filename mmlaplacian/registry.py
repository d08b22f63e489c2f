"""Registries of mmlaplacian, and registration into mmdet and mmpretrain.

``MODELS`` is a child of mmengine's root model registry with scope
``mmlaplacian``, so configs of any OpenMMLab package can say
``type='mmlaplacian.LaplacianFormer'``. The backbone is also registered in
mmdet's and mmpretrain's ``MODELS`` (when they are installed) so that plain
``type='LaplacianFormer'`` works under their default scopes.
"""
import importlib

from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import Registry

MODELS = Registry(
    'model',
    parent=MMENGINE_MODELS,
    scope='mmlaplacian',
    locations=['mmlaplacian.models'])

DOWNSTREAM_REGISTRIES = ('mmdet.registry', 'mmpretrain.registry')


def register_downstream(module_cls: type) -> type:
    """Register ``module_cls`` in mmdet's and mmpretrain's ``MODELS``."""
    for module_name in DOWNSTREAM_REGISTRIES:
        try:
            registry = importlib.import_module(module_name).MODELS
        except ImportError:
            continue
        # module_dict, not get(): get() would import the whole package.
        if registry.module_dict.get(module_cls.__name__) is not module_cls:
            registry.register_module(module=module_cls, force=True)
    return module_cls
