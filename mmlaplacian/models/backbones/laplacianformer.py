"""LaplacianFormer: a hierarchical backbone with Laplacian-kernel attention."""
from __future__ import annotations

import copy
import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm

from mmlaplacian.ops.validation import autocast_enabled
from mmlaplacian.utils.logging import log_info
from ..checkpoint import (STATE_DICT_VERSION, check_pretrained_checkpoint,
                          filter_checkpoint, load_checkpoint_file,
                          upgrade_state_dict)
from ..layers import ConvBNReLU, ConvStem, LaplacianFormerStage
from ..utils.weight_init import trunc_normal_

ARCH_KEYS = {'embed_dims', 'depths', 'num_heads'}
NUM_STAGES = 4


class LaplacianFormer(nn.Module):
    """LaplacianFormer backbone (SOFT++ macro-architecture).

    A plain ``nn.Module`` that needs torch only. It keeps the interface of
    mmengine's ``BaseModule`` that OpenMMLab models call (``init_cfg``,
    ``init_weights``, ``is_init``), so mmdet, mmseg and mmpretrain use it
    like their own backbones once ``import mmlaplacian`` has registered it.

    Four :class:`LaplacianFormerStage` s at strides 4/8/16/32; each brings
    the map to its stride (the conv stem, then stride-2 convs), adds a
    learned position embedding (defined on the ``pretrain_img_size`` grid,
    resized bilinearly to the input, so any input size works), runs its
    blocks and normalises its output. Stages 1–3 use
    :class:`LaplacianAttention` (linear in the tokens); stage 4 uses softmax
    attention by default.

    Args:
        arch (str | dict): ``'tiny'``, ``'small'``, ``'medium'``, ``'large'``,
            ``'huge'``, or a dict with keys ``embed_dims``, ``depths`` and
            ``num_heads`` (four entries each). Defaults to ``'tiny'``.
        in_channels (int): Image channels. Defaults to 3.
        pretrain_img_size (int): Image size that defines the position
            embedding grids. Defaults to 224.
        mlp_ratio (float): FFN hidden ratio. Defaults to 4.
        attn_cfg (dict, optional): Overrides for :class:`LaplacianAttention`
            in stages 1–3 (``kernel``, ``lam``, ``learnable_lam``,
            ``num_landmarks``, ``feature_map``, ``inverse``, ``ns_iters``,
            ``eps``, ``share_qk``, ``impl``, ...). Its ``mode`` and
            ``chunk_tokens`` set the CPU inference: by default (``'auto'``)
            the attention and its block run over chunks of 2048 tokens on
            the CPU without autograd, the same function in less memory;
            ``mode='full'`` never chunks.
        conv_kernel_sizes (Sequence[int]): Depthwise conv kernel on V in
            stages 1–3. Defaults to ``(9, 5, 3)``.
        stage4_attention (str): ``'softmax'`` (default) or ``'laplacian'``.
        linear_attention (str): Attention for stages 1–3: ``'laplacian'``
            (default) or ``'softmax'`` (for ablations; quadratic memory).
        drop_rate (float): Dropout rate. Defaults to 0.
        drop_path_rate (float): Stochastic depth, increased linearly over
            blocks. Defaults to 0.1.
        out_indices (Sequence[int]): Stages whose outputs are returned.
            Defaults to ``(0, 1, 2, 3)``.
        frozen_stages (int): -1 freezes nothing, 0 the stem, k >= 1 stages
            1..k (the stem included). Defaults to -1.
        norm_eval (bool): Keep BatchNorm layers in eval mode while
            training. Defaults to False.
        with_cp (bool): Gradient checkpointing per block. Defaults to False.
        init_cfg (dict | list[dict], optional): ``dict(type='Pretrained',
            checkpoint=PATH)`` loads an mmpretrain, mmdet, timm-style or plain
            checkpoint.

    Raises:
        KeyError: For an unknown arch name or malformed arch dict.
        ValueError: For settings out of range (named in the message).

    Example:
        >>> model = LaplacianFormer('tiny')
        >>> outs = model(torch.rand(1, 3, 112, 137))
        >>> [tuple(o.shape) for o in outs]
        [(1, 64, 28, 35), (1, 128, 14, 18), (1, 320, 7, 9), (1, 512, 4, 5)]
    """
    _version = STATE_DICT_VERSION
    arch_zoo: Dict[str, dict] = {
        **dict.fromkeys(['t', 'tiny'], {
            'embed_dims': [64, 128, 320, 512],
            'depths': [1, 2, 3, 2],
            'num_heads': [2, 4, 10, 16]
        }),
        **dict.fromkeys(['s', 'small'], {
            'embed_dims': [64, 128, 320, 512],
            'depths': [1, 3, 7, 4],
            'num_heads': [2, 4, 10, 16]
        }),
        **dict.fromkeys(['m', 'medium'], {
            'embed_dims': [64, 128, 288, 512],
            'depths': [1, 3, 29, 5],
            'num_heads': [2, 4, 9, 16]
        }),
        **dict.fromkeys(['l', 'large'], {
            'embed_dims': [64, 128, 320, 512],
            'depths': [1, 3, 40, 5],
            'num_heads': [2, 4, 10, 16]
        }),
        **dict.fromkeys(['h', 'huge'], {
            'embed_dims': [64, 128, 352, 512],
            'depths': [1, 5, 49, 5],
            'num_heads': [2, 4, 11, 16]
        }),
    }
    num_stages = NUM_STAGES

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 in_channels: int = 3,
                 pretrain_img_size: int = 224,
                 mlp_ratio: float = 4.,
                 attn_cfg: Optional[dict] = None,
                 conv_kernel_sizes: Sequence[int] = (9, 5, 3),
                 stage4_attention: str = 'softmax',
                 linear_attention: str = 'laplacian',
                 drop_rate: float = 0.,
                 drop_path_rate: float = 0.1,
                 out_indices: Sequence[int] = (0, 1, 2, 3),
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 with_cp: bool = False,
                 init_cfg: Optional[Union[dict, List[dict]]] = None) -> None:
        super().__init__()
        self.init_cfg = copy.deepcopy(init_cfg)
        self._is_init = False
        self.arch_settings = self._resolve_arch(arch)
        self.embed_dims: List[int] = list(self.arch_settings['embed_dims'])
        self.depths: List[int] = list(self.arch_settings['depths'])
        self.num_heads: List[int] = list(self.arch_settings['num_heads'])
        self.out_indices = tuple(out_indices)
        _check_settings(conv_kernel_sizes, self.out_indices, frozen_stages,
                        drop_rate, drop_path_rate)
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        self.with_cp = with_cp
        self.pretrain_img_size = pretrain_img_size

        rates = torch.linspace(0, drop_path_rate, sum(self.depths)).tolist()
        self.stages = nn.ModuleList()
        for i, (dims, depth, heads) in enumerate(
                zip(self.embed_dims, self.depths, self.num_heads)):
            if i == 0:
                downsample = ConvStem(in_channels, dims)
            else:
                downsample = ConvBNReLU(self.embed_dims[i - 1], dims, 2)
            attention = (stage4_attention
                         if i == NUM_STAGES - 1 else linear_attention)
            stage_attn_cfg = None
            if attention == 'laplacian':
                stage_attn_cfg = dict(
                    conv_kernel_size=conv_kernel_sizes[i]
                    if i < NUM_STAGES - 1 else 0,
                    **(attn_cfg or {}))
            start = sum(self.depths[:i])
            self.stages.append(
                LaplacianFormerStage(
                    downsample,
                    dims,
                    depth,
                    heads,
                    pos_embed_size=pretrain_img_size // 2**(i + 2),
                    with_norm=i in self.out_indices,
                    drop_path_rates=rates[start:start + depth],
                    drop=drop_rate,
                    with_cp=with_cp,
                    mlp_ratio=mlp_ratio,
                    attention=attention,
                    attn_cfg=stage_attn_cfg))
        self._register_load_state_dict_pre_hook(self._upgrade_keys_hook)

    @classmethod
    def _resolve_arch(cls, arch: Union[str, dict]) -> dict:
        if isinstance(arch, str):
            key = arch.lower()
            if key not in cls.arch_zoo:
                raise KeyError(f'LaplacianFormer: unknown arch {arch!r}; '
                               f'choose one of {_arch_names()} or pass a '
                               f'dict with keys {sorted(ARCH_KEYS)}')
            return copy.deepcopy(cls.arch_zoo[key])
        if not isinstance(arch, Mapping) or set(arch) != ARCH_KEYS:
            raise KeyError('LaplacianFormer: a custom arch must be a dict '
                           f'with exactly the keys {sorted(ARCH_KEYS)}, got '
                           f'{arch!r}')
        for key in sorted(ARCH_KEYS):
            if len(arch[key]) != NUM_STAGES:
                raise ValueError(f'LaplacianFormer: arch[{key!r}] needs '
                                 f'{NUM_STAGES} entries (one per stage), got '
                                 f'{list(arch[key])}')
        for dims, heads in zip(arch['embed_dims'], arch['num_heads']):
            if dims % heads:
                raise ValueError(
                    f'LaplacianFormer: embed_dims {list(arch["embed_dims"])} '
                    f'must be divisible by num_heads '
                    f'{list(arch["num_heads"])} stage by stage ({dims} % '
                    f'{heads} != 0)')
        return copy.deepcopy(dict(arch))

    # --------------------------------------------------------------- forward
    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """Return the NCHW feature maps of the stages in ``out_indices``."""
        self._check_input(x)
        outs = []
        for i, stage in enumerate(self.stages):
            x, out = stage(x)
            if i in self.out_indices:
                outs.append(out)
        return tuple(outs)

    def _check_input(self, x: torch.Tensor) -> None:
        in_channels = self.stages[0].downsample.in_channels
        if x.ndim != 4 or x.shape[1] != in_channels:
            raise ValueError('LaplacianFormer expects images of shape '
                             f'(B, {in_channels}, H, W), got {tuple(x.shape)}')
        if x.shape[0] == 0 or x.shape[2] == 0 or x.shape[3] == 0:
            raise ValueError('LaplacianFormer got an empty batch of shape '
                             f'{tuple(x.shape)}')
        weight_dtype = self.stages[0].pos_embed.dtype
        if x.dtype != weight_dtype and not autocast_enabled(x.device):
            raise TypeError(
                f'LaplacianFormer: input dtype {x.dtype} differs from the '
                f'weights\' {weight_dtype}; convert one of them (e.g. '
                f'model.to({x.dtype})) or run under torch.autocast')

    # ------------------------------------------------------------------ init
    @property
    def is_init(self) -> bool:
        """Whether :meth:`init_weights` has run (read by mmengine's
        ``BaseModule.init_weights`` of the model around this backbone)."""
        return self._is_init

    @is_init.setter
    def is_init(self, value: bool) -> None:
        self._is_init = value

    def init_weights(self) -> None:
        """Initialise from scratch, then load the ``Pretrained`` checkpoint
        when ``init_cfg`` names one.

        Raises:
            PretrainedNotFoundError: When the ``Pretrained`` file is missing
                (the message gives the ways on).
        """
        cfgs = self.init_cfg if isinstance(self.init_cfg, list) else [
            self.init_cfg
        ]
        pretrained = [
            c for c in cfgs
            if isinstance(c, dict) and c.get('type') == 'Pretrained'
        ]
        self._init_from_scratch()
        if pretrained:
            # A missing file is refused with the ways on (none is published
            # yet): also under mmdet's and mmseg's own tools.
            check_pretrained_checkpoint(pretrained[-1]['checkpoint'])
            self.load_pretrained(
                pretrained[-1]['checkpoint'],
                map_location=pretrained[-1].get('map_location', 'cpu'))
        self._is_init = True

    def _init_from_scratch(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                trunc_normal_(module.weight, std=.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(
                    module.weight, mode='fan_out', nonlinearity='relu')
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for stage in self.stages:
            trunc_normal_(stage.pos_embed, std=.02)

    def load_pretrained(self, checkpoint: str,
                        map_location: str = 'cpu') -> Tuple[list, list]:
        """Load backbone weights from a checkpoint of any supported layout.

        Args:
            checkpoint (str): Path or URL of the checkpoint.
            map_location (str): Device to load tensors onto.

        Returns:
            tuple[list, list]: Missing and unexpected keys.

        Raises:
            TypeError: When the file holds no state dict.
            RuntimeError: When no tensor matches, or the checkpoint is of
                another variant (both variants and the first mismatching
                key are named).
        """
        raw = load_checkpoint_file(checkpoint, map_location=map_location)
        try:
            # Mismatched shapes are kept, to name the other variant below.
            result = filter_checkpoint(
                raw, self.state_dict(), drop_mismatched=False)
        except TypeError as err:
            raise TypeError(f'{checkpoint}: {err}') from err
        state = result.state_dict
        self._check_same_variant(state, checkpoint)
        missing, unexpected = self.load_state_dict(state, strict=False)
        loaded = len(state) - len(unexpected)
        if loaded == 0:
            first = [k for keys in result.skipped.values() for k in keys]
            raise RuntimeError(
                f'{checkpoint}: no tensor matches a LaplacianFormer '
                f'parameter, in our naming or SOFT-style (first keys: '
                f'{first[:5]}); see tools/model_converters/'
                'laplacianformer_to_mmdet.py for the key layouts it reads')
        log_info(
            f'LaplacianFormer: loaded {loaded} tensors from {checkpoint}; '
            f'missing {len(missing)}: {missing[:8]}; '
            f'unexpected {len(unexpected)}: {unexpected[:8]}')
        return missing, unexpected

    def _check_same_variant(self, state: Dict[str, torch.Tensor],
                            checkpoint: str) -> None:
        """Refuse a checkpoint of another variant; within this variant,
        drop (and log) tensors of another shape, e.g. a SOFT-style 2x2 patch
        embedding where ours is a 3x3 conv."""
        own = self.state_dict()
        mismatched = [
            key for key, value in state.items()
            if key in own and value.shape != own[key].shape
        ]
        if not mismatched:
            return
        if describe_arch(state) != describe_arch(own):
            key = mismatched[0]
            raise RuntimeError(
                f'{checkpoint} holds a LaplacianFormer of another variant '
                f'({describe_arch(state)}) than this model '
                f'({describe_arch(own)}): first mismatch {key!r} '
                f'{tuple(state[key].shape)} vs {tuple(own[key].shape)}')
        for key in mismatched:
            state.pop(key)
        log_info(
            f'LaplacianFormer: {checkpoint}: left out {len(mismatched)} '
            f'tensors of another shape: {mismatched[:8]}')

    def _upgrade_keys_hook(self, state_dict, prefix, local_metadata, *args,
                           **kwargs) -> None:
        """Rename keys of state dicts saved before stages were modules."""
        version = local_metadata.get('version')
        if version is None or version < STATE_DICT_VERSION:
            upgrade_state_dict(state_dict, prefix)

    # -------------------------------------------------------------- freezing
    def _frozen_modules(self) -> List[nn.Module]:
        if self.frozen_stages < 0:
            return []
        if self.frozen_stages == 0:
            return [self.stages[0].downsample]  # the stem
        return list(self.stages[:self.frozen_stages])

    def _freeze_stages(self) -> None:
        for module in self._frozen_modules():
            module.eval()
            for param in module.parameters():
                param.requires_grad = False

    def train(self, mode: bool = True) -> 'LaplacianFormer':
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for module in self.modules():
                if isinstance(module, _BatchNorm):
                    module.eval()
        return self


def _arch_names() -> List[str]:
    return sorted({k for k in LaplacianFormer.arch_zoo if len(k) > 1})


def arch_of_state_dict(
        state: Mapping[str, torch.Tensor]) -> Tuple[Optional[str], dict]:
    """The variant a (version-2) backbone state dict belongs to.

    Embed dims and depths are read from the blocks' ``norm1`` weights.

    Returns:
        tuple: The arch name, or None when no variant matches, and
        ``dict(embed_dims=[...], depths=[...])`` as read (0 for a stage
        without blocks).
    """
    dims, depths = [0] * NUM_STAGES, [0] * NUM_STAGES
    for key, value in state.items():
        match = re.match(r'^stages\.(\d)\.blocks\.(\d+)\.norm1\.weight$', key)
        if match and int(match[1]) < NUM_STAGES:
            stage, block = int(match[1]), int(match[2])
            depths[stage] = max(depths[stage], block + 1)
            dims[stage] = int(value.shape[0])
    found = dict(embed_dims=dims, depths=depths)
    for name in _arch_names():
        arch = LaplacianFormer.arch_zoo[name]
        if arch['embed_dims'] == dims and arch['depths'] == depths:
            return name, found
    return None, found


def describe_arch(state: Mapping[str, torch.Tensor]) -> str:
    """Name the variant of a (version-2) backbone state dict, for messages."""
    name, found = arch_of_state_dict(state)
    dims, depths = found['embed_dims'], found['depths']
    if name is None:
        return f'custom: embed_dims {dims}, depths {depths}'
    return f"'{name}': embed_dims {dims}, depths {depths}"


def _check_settings(conv_kernel_sizes: Sequence[int],
                    out_indices: Tuple[int, ...], frozen_stages: int,
                    drop_rate: float, drop_path_rate: float) -> None:
    """Raise a ValueError naming the first setting outside its range."""
    if len(conv_kernel_sizes) != NUM_STAGES - 1:
        raise ValueError('LaplacianFormer: conv_kernel_sizes needs 3 entries '
                         f'(stages 1-3), got {list(conv_kernel_sizes)}')
    if not out_indices or any(not 0 <= i < NUM_STAGES for i in out_indices):
        raise ValueError('LaplacianFormer: out_indices must be a non-empty '
                         f'subset of 0..3, got {out_indices}')
    if not -1 <= frozen_stages <= NUM_STAGES:
        raise ValueError('LaplacianFormer: frozen_stages must lie in '
                         f'[-1, 4], got {frozen_stages}')
    for name, rate in (('drop_rate', drop_rate),
                       ('drop_path_rate', drop_path_rate)):
        if not 0 <= rate < 1:
            raise ValueError(
                f'LaplacianFormer: {name} must lie in [0, 1), got {rate}')
