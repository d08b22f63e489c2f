"""Test-only start-up code of a training run that the fault tests kill
half-way through a checkpoint write.

Python imports ``sitecustomize`` when the interpreter starts; the tests put
this folder first on the run's ``PYTHONPATH``. It wraps the built-in
``open`` so that a checkpoint's temporary file (``.epoch_N.pth.tmp<pid>``,
the name ``mmlaplacian.engine.atomic_files`` writes first) receives half of
its bytes, flushed to the disk, and then nothing for :data:`PAUSE_SECONDS`:
the test sees the half-written file and sends SIGKILL. Every other file is
opened as usual.
"""
import builtins
import os
import os.path as osp
import re
import time

PAUSE_SECONDS = 600
CHECKPOINT_TEMPORARY = re.compile(r'^\..+\.pth\.tmp\d+$')


class HalfThenPause:
    """A file whose ``write`` stops half-way, on disk, for
    :data:`PAUSE_SECONDS` before it writes the rest (the package writes a
    checkpoint's bytes in one call)."""

    def __init__(self, file) -> None:
        self._file = file

    def write(self, data) -> int:
        data = memoryview(data).cast('B')
        half = len(data) // 2
        self._file.write(data[:half])
        self._file.flush()
        os.fsync(self._file.fileno())
        time.sleep(PAUSE_SECONDS)
        return half + self._file.write(data[half:])

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __enter__(self) -> 'HalfThenPause':
        return self

    def __exit__(self, *exc_info):
        return self._file.__exit__(*exc_info)


_open = builtins.open


def open_checkpoints_slowly(file, mode='r', *args, **kwargs):
    opened = _open(file, mode, *args, **kwargs)
    name = os.fspath(file) if isinstance(file, (str, os.PathLike)) else None
    if ('w' in mode and isinstance(name, str)
            and CHECKPOINT_TEMPORARY.match(osp.basename(name))):
        return HalfThenPause(opened)
    return opened


builtins.open = open_checkpoints_slowly
