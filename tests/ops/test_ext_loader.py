"""Loading of mmlaplacian._ext: an extension built from older sources is
refused with a message to rebuild, instead of failing at the first call."""
import types

import pytest

from mmlaplacian.ops import ext_loader


@pytest.fixture
def fake_ext(monkeypatch):
    """Makes ``import mmlaplacian._ext`` return a stand-in module."""
    module = types.ModuleType('mmlaplacian._ext')
    for name in ext_loader._REQUIRED_FUNCS:
        setattr(module, name, lambda *args: ['cpu'])
    importlib = types.SimpleNamespace(import_module=lambda name: module)
    monkeypatch.setattr(ext_loader, 'importlib', importlib)
    # monkeypatch restores the real device set afterwards.
    monkeypatch.setattr(ext_loader, '_COMPILED_DEVICES', None)
    ext_loader._load.cache_clear()
    yield module
    ext_loader._load.cache_clear()


@pytest.mark.parametrize('abi', [None, 1], ids=['no-version', 'version-1'])
def test_older_build_is_refused(fake_ext, abi):
    if abi is not None:
        fake_ext.abi_version = abi
    info = ext_loader.ext_info()
    assert not info['loaded']
    assert 'out of date' in info['error'] and 'rebuild' in info['error']
    assert f'needs {ext_loader.EXT_ABI_VERSION}' in info['error']


def test_current_build_loads(fake_ext):
    fake_ext.abi_version = ext_loader.EXT_ABI_VERSION
    info = ext_loader.ext_info()
    assert info['loaded'] and info['devices'] == ['cpu']


def test_built_extension_matches_this_code():
    """The extension in this tree (when built) has the current interface."""
    ext = ext_loader.load_ext()
    if ext is None:
        pytest.skip(f'mmlaplacian._ext not loaded: {ext_loader._load()[1]}')
    assert ext.abi_version == ext_loader.EXT_ABI_VERSION
