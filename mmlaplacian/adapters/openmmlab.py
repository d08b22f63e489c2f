"""LaplacianFormer in OpenMMLab: what ``import mmlaplacian`` adds when
mmengine is installed (the configs' ``custom_imports`` import it).

- The backbone in our ``MODELS`` registry (scope ``mmlaplacian``) and in
  mmdet's, mmseg's and mmpretrain's, where installed.
- mmengine's checkpoint loader fixed for torch >= 2.6 (full checkpoints,
  ``--resume`` included, for mmdet's own tools too).
- The hooks and the CPU AMP wrapper (:mod:`mmlaplacian.engine`), the
  checked COCO dataset, the label-map dataset and its transform
  (:mod:`mmlaplacian.datasets`).

Works on both OpenMMLab stacks: upstream (mmengine 0.10.7, mmcv 2.1.0) and
the maintained fork with the same import names (onedl-*), see
``docs/frameworks.md``.
"""
from mmlaplacian import datasets, engine  # noqa: F401  (they register)
from mmlaplacian.engine.checkpoint_loader import \
    install_mmengine_checkpoint_fix
from mmlaplacian.models import LaplacianFormer
from mmlaplacian.registry import MODELS, register

# mmengine 0.10.7 cannot load its own checkpoints under torch >= 2.6
# (the weights-only default); fix it for every user of the package.
install_mmengine_checkpoint_fix()
register(MODELS, 'MODELS')(LaplacianFormer)
