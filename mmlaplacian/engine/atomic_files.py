"""Files that appear whole or not at all: temporary name, fsync, rename.

mmengine 0.10.7 writes a checkpoint straight to its final path (``open(path,
'wb').write(...)``), so a run killed during the write leaves a truncated
``epoch_N.pth`` that ``--resume`` then loads. :func:`atomic_write` writes to
a hidden temporary file in the same folder, flushes it to the disk and
renames it over the final name (``os.replace`` is atomic within a file
system): a reader sees the old file or the new one, never a part.
:class:`AtomicLocalBackend` is mmengine's local file backend with this
write, registered as ``backend='local_atomic'``.
"""
from __future__ import annotations

import contextlib
import os
import os.path as osp
import re
from pathlib import Path
from typing import List, Union

from mmengine.fileio import LocalBackend, register_backend

ATOMIC_BACKEND = 'local_atomic'
_TEMPORARY = re.compile(r'^\.(?P<name>.+)\.tmp\d+$')


def temporary_path(path: str) -> str:
    """The hidden name beside ``path`` that :func:`atomic_write` writes
    first (``dir/.name.tmp<pid>``)."""
    folder, name = osp.split(path)
    return osp.join(folder, f'.{name}.tmp{os.getpid()}')


def leftover_temporaries(folder: str) -> List[str]:
    """Temporary files in ``folder`` of writes that never finished (the
    writer was killed)."""
    if not osp.isdir(folder):
        return []
    return sorted(
        osp.join(folder, name) for name in os.listdir(folder)
        if _TEMPORARY.match(name))


def _fsync_folder(folder: str) -> None:
    """Make the rename itself durable (where folders can be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Union[str, Path], data: Union[bytes, bytearray,
                                                     memoryview]) -> None:
    """Write ``data`` to ``path`` so that ``path`` is never partial.

    Args:
        path (str | Path): The final file; its folder is created if needed.
        data (bytes-like): The whole content.

    Raises:
        OSError: The write failed (a full disk, a file-size limit, no
            permission). The temporary file is removed and ``path`` is as
            it was before the call.
    """
    path = str(path)
    folder = osp.dirname(osp.abspath(path))
    os.makedirs(folder, exist_ok=True)
    temporary = temporary_path(path)
    try:
        with open(temporary, 'wb') as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        # A kill (SIGKILL) skips this; the next training run removes the
        # leftover (see AtomicCheckpointHook).
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise
    _fsync_folder(folder)


class AtomicLocalBackend(LocalBackend):
    """mmengine's ``LocalBackend`` whose ``put`` and ``put_text`` write
    through :func:`atomic_write` (``backend_args=dict(backend='local_atomic')``
    in a hook or ``save_checkpoint``)."""

    def put(self, obj: bytes, filepath: Union[str, Path]) -> None:
        atomic_write(filepath, obj)

    def put_text(self,
                 obj: str,
                 filepath: Union[str, Path],
                 encoding: str = 'utf-8') -> None:
        atomic_write(filepath, obj.encode(encoding))


# force: importing the package twice (e.g. by path and by name) is fine.
register_backend(ATOMIC_BACKEND, AtomicLocalBackend, force=True)
