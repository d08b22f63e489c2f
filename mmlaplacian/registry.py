"""Registries of mmlaplacian, and registration into mmdet, mmpretrain and
mmseg.

Each registry is a child of mmengine's root registry of its kind with scope
``mmlaplacian``, so configs of any OpenMMLab package can say
``type='mmlaplacian.LaplacianFormer'`` (likewise the hooks, the optimiser
wrapper, the datasets and transforms); nothing is written into mmengine's
root registries. What the configs name without a scope is also registered
in mmdet's, mmpretrain's and mmseg's registries of the same kind (when they
are installed), so that plain ``type='LaplacianFormer'`` or
``type='FiniteCheckHook'`` works under their default scopes. Only the
packages' ``registry`` modules are imported, never their models.
"""
import importlib
from typing import Callable, Optional, Sequence

from mmengine.registry import DATASETS as MMENGINE_DATASETS
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import TRANSFORMS as MMENGINE_TRANSFORMS
from mmengine.registry import Registry

SCOPE = 'mmlaplacian'
MODELS = Registry(
    'model',
    parent=MMENGINE_MODELS,
    scope=SCOPE,
    locations=['mmlaplacian.adapters.openmmlab'])
HOOKS = Registry(
    'hook', parent=MMENGINE_HOOKS, scope=SCOPE,
    locations=['mmlaplacian.engine'])
OPTIM_WRAPPERS = Registry(
    'optim_wrapper', parent=MMENGINE_OPTIM_WRAPPERS, scope=SCOPE,
    locations=['mmlaplacian.engine'])
DATASETS = Registry(
    'dataset', parent=MMENGINE_DATASETS, scope=SCOPE,
    locations=['mmlaplacian.datasets'])
TRANSFORMS = Registry(
    'transform', parent=MMENGINE_TRANSFORMS, scope=SCOPE,
    locations=['mmlaplacian.datasets'])
DOWNSTREAM_REGISTRIES = ('mmdet.registry', 'mmpretrain.registry',
                         'mmseg.registry')


def register(registry: Registry,
             registry_name: str,
             packages: Optional[Sequence[str]] = None) -> Callable:
    """Class decorator: register in our ``registry`` and in the downstream
    packages' registries named ``registry_name`` (see
    :func:`register_downstream`)."""

    def decorator(module_cls: Callable) -> Callable:
        registry.register_module(module=module_cls)
        return register_downstream(module_cls, registry_name,
                                   packages or DOWNSTREAM_REGISTRIES)

    return decorator


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
        except (ImportError, AttributeError):  # not installed, or no such
            continue
        # module_dict, not get(): get() would import the whole package.
        if registry.module_dict.get(name) is not module_cls:
            registry.register_module(name=name, module=module_cls, force=True)
    return module_cls
