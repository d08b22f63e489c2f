"""One way of registering: our own child registries of mmengine's (scope
``mmlaplacian``), plus the plain names the configs use in mmdet's, mmseg's
and mmpretrain's registries; nothing in mmengine's root registries."""
import importlib

import mmengine.registry as root
import pytest

import mmlaplacian  # noqa: F401  (registers everything)
from mmlaplacian import registry as ours

# registry kind -> names the configs and tools use
REGISTERED = {
    'MODELS': ['LaplacianFormer'],
    'HOOKS': ['FiniteCheckHook', 'RankZeroLoggerHook', 'AtomicCheckpointHook'],
    'OPTIM_WRAPPERS': ['CPUAutocastOptimWrapper'],
}


@pytest.mark.parametrize('kind', sorted(REGISTERED) + ['DATASETS'])
def test_nothing_is_registered_in_mmengine_root(kind):
    names = REGISTERED.get(kind, ['CheckedCocoDataset', 'LabelMapDataset'])
    assert not set(names) & set(getattr(root, kind).module_dict)
    for name in names:
        assert getattr(ours, kind).get(name) is not None, name


@pytest.mark.parametrize('package', ['mmdet', 'mmseg', 'mmpretrain'])
def test_plain_and_scoped_names_resolve_in_each_framework(package):
    downstream = pytest.importorskip(f'{package}.registry')
    importlib.import_module('mmlaplacian.datasets')
    for kind, names in REGISTERED.items():
        registry = getattr(downstream, kind)
        for name in names:
            cls = getattr(ours, kind).get(name)
            assert registry.get(name) is cls, (package, kind, name)
            assert registry.get(f'mmlaplacian.{name}') is cls
    if package == 'mmdet':
        assert downstream.DATASETS.get('CheckedCocoDataset') is not None
    if package == 'mmseg':
        assert downstream.TRANSFORMS.get('CheckLabelMap') is not None
        assert downstream.DATASETS.get('LabelMapDataset') is not None
