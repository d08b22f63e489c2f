"""Let mmengine load its own checkpoints under torch >= 2.6.

torch 2.6 made ``torch.load`` default to ``weights_only=True``. mmengine
0.10.7 calls ``torch.load`` without that argument, and its full checkpoints
carry the message hub (``HistoryBuffer``), numpy scalars and optimizer
state, which the weights-only unpickler refuses: ``--resume`` and
``load_from`` then fail. (The maintained fork's 0.10.12 retries with
``weights_only=False`` itself, after a warning.)

:func:`install_mmengine_checkpoint_fix` registers the core's full-checkpoint
reader as mmengine's local-file loader. Only mmengine's checkpoint loading
changes; ``torch.load`` itself does not. A checkpoint is pickled Python:
load only files from a source you trust.
"""
from __future__ import annotations

from mmengine.runner.checkpoint import CheckpointLoader

from mmlaplacian.models.checkpoint import load_local_checkpoint


def install_mmengine_checkpoint_fix() -> None:
    """Make mmengine's local checkpoint loader unpickle full checkpoints
    (in every process that imports ``mmlaplacian``, mmdet's tools too)."""
    # '' is the prefix of local paths, the loader without a scheme.
    CheckpointLoader.register_scheme(
        prefixes='', loader=load_local_checkpoint, force=True)
