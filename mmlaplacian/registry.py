"""Registries of mmlaplacian, and registration into mmdet, mmpretrain and
mmseg.

``MODELS`` is a child of mmengine's root model registry with scope
``mmlaplacian``, so configs of any OpenMMLab package can say
``type='mmlaplacian.LaplacianFormer'``. The backbone is also registered in
mmdet's, mmpretrain's and mmseg's ``MODELS`` (when they are installed) so
that plain ``type='LaplacianFormer'`` works under their default scopes.
Only the packages' ``registry`` modules are imported, never their models.
"""
import importlib
from typing import Callable, Optional, Sequence

from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import Registry

MODELS = Registry(
    'model',
    parent=MMENGINE_MODELS,
    scope='mmlaplacian',
    locations=['mmlaplacian.models'])

DOWNSTREAM_REGISTRIES = ('mmdet.registry', 'mmpretrain.registry',
                         'mmseg.registry')


def register_downstream(module_cls: Callable,
                        registry_name: str = 'MODELS',
                        packages: Sequence[str] = DOWNSTREAM_REGISTRIES,
                        name: Optional[str] = None) -> Callable:
    """Register ``module_cls`` in the downstream packages' registries.

    Args:
        module_cls (Callable): A class, or a function that builds one.
        registry_name (str): The registry of each package, e.g.
            ``'MODELS'``, ``'DATASETS'``, ``'TRANSFORMS'``.
        packages (Sequence[str]): The ``registry`` modules to register in;
            those not installed are skipped.
        name (str, optional): The registered name; defaults to
            ``module_cls.__name__``.

    Returns:
        Callable: ``module_cls``, so that this works as a decorator.
    """
    name = name or module_cls.__name__
    for module_name in packages:
        try:
            registry = getattr(
                importlib.import_module(module_name), registry_name)
        except ImportError:
            continue
        # module_dict, not get(): get() would import the whole package.
        if registry.module_dict.get(name) is not module_cls:
            registry.register_module(name=name, module=module_cls, force=True)
    return module_cls
