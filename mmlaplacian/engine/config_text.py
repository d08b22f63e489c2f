"""A config whose text is formatted once, not at every checkpoint."""
from __future__ import annotations

from mmengine.config import Config


class FormattedOnceConfig(Config):
    """An mmengine ``Config`` that formats its ``pretty_text`` with yapf
    once for each content of the config.

    mmengine's runner asks for the text when it logs the environment, when
    it dumps the config to the work directory, in a hook before training
    and in every checkpoint's ``meta``; each time, yapf formats it anew
    (about 0.3 s on a CPU core for a Mask R-CNN config). The unformatted
    text is cheap to make and is the cache key, so a changed config is
    formatted again and the text is always the one mmengine would give.
    """

    @classmethod
    def of(cls, cfg: Config) -> 'FormattedOnceConfig':
        """The same config (its dict shared, as ``copy.copy`` does)."""
        if isinstance(cfg, cls):
            return cfg
        other = cls.__new__(cls)
        other.__dict__.update(cfg.__dict__)
        return other

    @property
    def pretty_text(self) -> str:
        """The text of ``Config.pretty_text``, formatted once per
        content."""
        key = self._unformatted_text()
        cached = self.__dict__.get('_formatted')
        if cached is None or cached[0] != key:
            cached = (key, Config.pretty_text.fget(self))
            object.__setattr__(self, '_formatted', cached)
        return cached[1]

    def _unformatted_text(self) -> str:
        formats = self._format_python_code
        object.__setattr__(self, '_format_python_code', False)
        try:
            return Config.pretty_text.fget(self)
        finally:
            object.__setattr__(self, '_format_python_code', formats)
