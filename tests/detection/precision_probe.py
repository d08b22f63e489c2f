"""A test-only mmengine hook that records in which precision each part of a
detector computes while it trains.

A config takes it with ``custom_imports = dict(imports=['mmlaplacian',
'precision_probe'])`` (this folder on PYTHONPATH) and ``custom_hooks =
[dict(type='PrecisionProbeHook')]``. At the end of training it writes
``precisions.json`` to the work directory: for the backbone, the neck and
the two heads, the dtypes of their convolutions' and linear layers' outputs
in the training iterations.
"""
import collections
import json
import os.path as osp

import torch
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS

PARTS = ('backbone', 'neck', 'rpn_head', 'roi_head')


@HOOKS.register_module()
class PrecisionProbeHook(Hook):
    """Records the output dtypes of every ``Conv2d`` and ``Linear`` of the
    detector's parts while the model is in training mode."""

    def before_train(self, runner) -> None:
        model = runner.model
        if is_model_wrapper(model):
            model = model.module
        self.seen = collections.defaultdict(set)
        for part in PARTS:
            for module in getattr(model, part).modules():
                if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
                    module.register_forward_hook(self._recorder(part))

    def _recorder(self, part: str):

        def record(module, args, output) -> None:
            if module.training:
                self.seen[part].add(str(output.dtype).replace('torch.', ''))

        return record

    def after_train(self, runner) -> None:
        with open(osp.join(runner.work_dir, 'precisions.json'), 'w',
                  encoding='utf-8') as f:
            json.dump({part: sorted(dtypes)
                       for part, dtypes in self.seen.items()}, f)
