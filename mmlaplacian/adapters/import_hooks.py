"""Run an adapter when its framework is imported, not before.

Importing timm takes over a second (it registers every model it has); a
process that never uses it (``tools/train.py``, a data generator) should not
pay that for ``import mmlaplacian``. :func:`import_with` imports the adapter
right away when the framework is already loaded, and otherwise right after
the framework's own first import.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Optional, Sequence


class _ThenImport(importlib.abc.Loader):
    """The framework's own loader, followed by the adapter's import."""

    def __init__(self, loader: importlib.abc.Loader, adapter: str) -> None:
        self._loader = loader
        self._adapter = adapter

    def create_module(self, spec: importlib.machinery.ModuleSpec
                      ) -> Optional[ModuleType]:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # The module keeps its own loader (for reloads and resource readers).
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        importlib.import_module(self._adapter)


class _AdapterTrigger(importlib.abc.MetaPathFinder):
    """Finds nothing itself; hands out the framework's spec with a loader
    that imports the adapter after it, once, then leaves
    ``sys.meta_path``."""

    def __init__(self, framework: str, adapter: str) -> None:
        self.framework = framework
        self.adapter = adapter

    def find_spec(self, fullname: str,
                  path: Optional[Sequence[str]],
                  target: Optional[ModuleType] = None
                  ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != self.framework:
            return None
        sys.meta_path.remove(self)  # one-shot; also keeps find_spec below
        spec = importlib.util.find_spec(fullname)  # from recursing here
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _ThenImport(spec.loader, self.adapter)
        return spec


def import_with(framework: str, adapter: str) -> None:
    """Import ``adapter`` together with ``framework``.

    Now if ``framework`` is loaded already, when it is first imported if it
    is installed, never if it is not.

    Args:
        framework (str): A top-level module name, e.g. ``'timm'``.
        adapter (str): The module that registers with it, e.g.
            ``'mmlaplacian.adapters.timm_models'``.
    """
    if sys.modules.get(framework) is not None:  # None: imports blocked
        importlib.import_module(adapter)
    elif any(isinstance(f, _AdapterTrigger) and f.framework == framework
             for f in sys.meta_path):
        return
    elif importlib.util.find_spec(framework) is not None:
        sys.meta_path.insert(0, _AdapterTrigger(framework, adapter))
