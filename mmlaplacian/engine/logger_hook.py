"""``LoggerHook`` that writes its files from rank 0 only.

mmengine 0.10.7's ``LoggerHook`` (no longer released upstream, hence the
fix here) has two writers per file in an N-process run:

- ``after_test_epoch`` dumps the test metrics to
  ``<work_dir>/<timestamp>/<timestamp>.json`` on *every* rank; all ranks
  share the timestamp, so they write the same file at once and it comes out
  corrupted when the writes interleave (a JSON object followed by the tail
  of another);
- ``after_run`` with ``out_dir`` set copies the log folder on every rank
  and, with ``keep_local=False``, every rank deletes the same files.

:class:`RankZeroLoggerHook` does both on rank 0 only (the metrics are the
gathered ones, the same on every rank). ``build_runner`` puts it in place of
``LoggerHook``.
"""
from __future__ import annotations

from typing import Dict, Optional

from mmengine.dist import is_main_process
from mmengine.hooks import LoggerHook

from mmlaplacian.registry import HOOKS, register


@register(HOOKS, 'HOOKS')
class RankZeroLoggerHook(LoggerHook):
    """mmengine's ``LoggerHook``, with the test-metrics file and the copy to
    ``out_dir`` written by rank 0 alone. Takes the same arguments."""

    def after_test_epoch(self,
                         runner,
                         metrics: Optional[Dict[str, float]] = None) -> None:
        if is_main_process():
            super().after_test_epoch(runner, metrics)

    def after_run(self, runner) -> None:
        if is_main_process():
            super().after_run(runner)
        else:
            runner.visualizer.close()
