"""``CheckpointHook`` whose checkpoints survive a kill or a full disk.

mmengine 0.10.7 (no longer released upstream, hence the fix here):

- writes ``epoch_N.pth`` and ``last_checkpoint`` straight to their final
  paths, so a run killed mid-write leaves a truncated checkpoint that
  ``--resume`` loads;
- with ``max_keep_ckpts``, deletes the oldest checkpoint *before* writing
  the new one: with ``max_keep_ckpts=1`` a failed write leaves no
  checkpoint at all.

:class:`AtomicCheckpointHook` writes both files through
:func:`~.atomic_files.atomic_write`, deletes outdated checkpoints only once
the new one and ``last_checkpoint`` are on disk, removes the temporary files
of a killed run, and turns a failed write into :class:`CheckpointWriteError`.
``build_runner`` puts it in place of ``CheckpointHook``.
"""
from __future__ import annotations

import errno
import os
import os.path as osp
from typing import List, Optional

from mmengine.dist import is_main_process
from mmengine.hooks import CheckpointHook
from mmengine.logging import print_log

from mmlaplacian.registry import HOOKS, register

from .atomic_files import ATOMIC_BACKEND, atomic_write, leftover_temporaries


# No space, a file over the size limit (``ulimit -f``), a quota exceeded.
_DISK_FULL = (errno.ENOSPC, errno.EFBIG,
              getattr(errno, 'EDQUOT', errno.ENOSPC))


class CheckpointWriteError(OSError):
    """A checkpoint could not be written; the previous one is intact."""


def _describe_failure(error: OSError, path: str, previous: Optional[str],
                      folder: str) -> str:
    cause = error.strerror or str(error)
    if error.errno in _DISK_FULL:
        advice = (f'The disk (or a file-size limit or quota) is full: free '
                  f'space in {folder} ')
    else:
        advice = f'Fix the cause in {folder} '
    kept = (f'{previous} is intact and is what --resume continues from'
            if previous else 'no earlier checkpoint exists; --resume starts '
            'the run again')
    return (f'could not write checkpoint {path}: {cause} (errno '
            f'{errno.errorcode.get(error.errno, error.errno)}). Nothing was '
            f'left in its place: {kept}. {advice}and rerun with --resume.')


def _read_last_checkpoint(work_dir: str) -> Optional[str]:
    path = osp.join(work_dir, 'last_checkpoint')
    if not osp.isfile(path):
        return None
    with open(path, encoding='utf-8') as f:
        return f.read().strip() or None


@register(HOOKS, 'HOOKS')
class AtomicCheckpointHook(CheckpointHook):
    """mmengine's ``CheckpointHook`` with atomic, ordered writes.

    Takes the same arguments. Local checkpoints (no ``backend_args`` or
    ``file_client_args`` given) are written under a temporary name, synced
    and renamed; remote ones are left to their backend.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.atomic = (self.backend_args is None
                       and self.file_client_args is None
                       and '://' not in str(self.out_dir or ''))
        if self.atomic:
            self.backend_args = dict(backend=ATOMIC_BACKEND)

    def before_train(self, runner) -> None:
        super().before_train(runner)
        if self.atomic and is_main_process():
            for folder in {self.out_dir, runner.work_dir}:
                for leftover in leftover_temporaries(folder):
                    os.remove(leftover)
                    print_log(
                        f'removed {leftover}: the unfinished write of a '
                        'killed run', logger='current')

    def _outdated_steps(self, step: int) -> List[int]:
        """Record ``step`` among the kept checkpoints; return the steps
        whose files must go once it is saved."""
        if self.max_keep_ckpts <= 0 or (self.keep_ckpt_ids
                                        and self.keep_ckpt_ids[-1] == step):
            return []
        outdated = []
        if len(self.keep_ckpt_ids) == self.max_keep_ckpts:
            outdated.append(self.keep_ckpt_ids.popleft())
        self.keep_ckpt_ids.append(step)
        return outdated

    def _save_checkpoint_with_step(self, runner, step, meta) -> None:
        filename = self.filename_tmpl.format(step)
        self.last_ckpt = self.file_backend.join_path(self.out_dir, filename)
        outdated = self._outdated_steps(step)
        if self.max_keep_ckpts > 0:
            runner.message_hub.update_info('keep_ckpt_ids',
                                           list(self.keep_ckpt_ids))
        runner.message_hub.update_info('last_ckpt', self.last_ckpt)
        previous = (_read_last_checkpoint(runner.work_dir)
                    if is_main_process() else None)
        try:
            runner.save_checkpoint(
                self.out_dir,
                filename,
                self.file_client_args,
                save_optimizer=self.save_optimizer,
                save_param_scheduler=self.save_param_scheduler,
                meta=meta,
                by_epoch=self.by_epoch,
                backend_args=self.backend_args,
                **self.args)
        except OSError as error:
            raise CheckpointWriteError(
                error.errno,
                _describe_failure(error, self.last_ckpt, previous,
                                  self.out_dir)) from error
        if not is_main_process():
            return
        atomic_write(
            osp.join(runner.work_dir, 'last_checkpoint'),
            str(self.last_ckpt).encode('utf-8'))
        # Only now that the new checkpoint is complete and named by
        # last_checkpoint may the outdated ones go.
        for old in outdated:
            path = self.file_backend.join_path(self.out_dir,
                                               self.filename_tmpl.format(old))
            if self.file_backend.isfile(path):
                self.file_backend.remove(path)
            elif self.file_backend.isdir(path):
                self.file_backend.rmtree(path)  # deepspeed's folders
