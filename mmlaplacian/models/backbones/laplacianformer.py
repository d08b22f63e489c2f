"""LaplacianFormer: a hierarchical backbone with Laplacian-kernel attention."""
from __future__ import annotations

import copy
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as cp
from mmengine.logging import print_log
from mmengine.model import BaseModule
from mmengine.model.weight_init import trunc_normal_
from mmengine.runner.checkpoint import CheckpointLoader
from torch.nn.modules.batchnorm import _BatchNorm

from ..layers import ConvBNReLU, ConvStem, LaplacianFormerBlock
from ..layers.conv_stem import STEM_BAND_ROWS
from ..layers.token_chunks import DEFAULT_CHUNK_TOKENS, use_chunks
from ..utils import filter_backbone_state_dict

ARCH_KEYS = {'embed_dims', 'depths', 'num_heads'}


class LaplacianFormer(BaseModule):
    """LaplacianFormer backbone (SOFT++ macro-architecture).

    A conv stem (stride 4) and four stages at strides 4/8/16/32, joined by
    stride-2 conv transitions. Stages 1–3 use :class:`LaplacianAttention`
    (linear in the tokens); stage 4 uses softmax attention. Learned absolute
    position embeddings, defined on the 224×224 grid, are resized bilinearly
    to the input, so any input size works.

    Args:
        arch (str | dict): ``'tiny'``, ``'small'``, ``'medium'``, ``'large'``,
            ``'huge'``, or a dict with keys ``embed_dims``, ``depths`` and
            ``num_heads`` (four entries each). Defaults to ``'tiny'``.
        in_channels (int): Image channels. Defaults to 3.
        pretrain_img_size (int): Image size that defines the position
            embedding grids. Defaults to 224.
        mlp_ratio (float): MLP hidden ratio. Defaults to 4.
        attn_cfg (dict, optional): Overrides for :class:`LaplacianAttention`
            in stages 1–3 (``kernel``, ``lam``, ``learnable_lam``,
            ``num_landmarks``, ``feature_map``, ``inverse``, ``ns_iters``,
            ``eps``, ``share_qk``, ``impl``, ...).
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
        frozen_stages (int): -1 freezes nothing, 0 the stem, k >= 1 the stem
            and stages 1..k. Defaults to -1.
        norm_eval (bool): Keep BatchNorm layers in eval mode while
            training. Defaults to False.
        with_cp (bool): Gradient checkpointing per block. Defaults to False.
        inference_chunk_tokens (int): On the CPU without autograd
            (inference), the Laplacian attention, the MLPs and the output
            norms run over chunks of this many tokens, so no N×m matrix is
            formed and every pass stays in cache, and the stem runs in bands
            of rows (:class:`ConvStem`); 0 runs all tokens at once and the
            stem in one pass. Defaults to 2048.
        init_cfg (dict | list[dict], optional): ``dict(type='Pretrained',
            checkpoint=PATH)`` loads an mmpretrain, mmdet, timm-style or plain
            checkpoint.

    Example:
        >>> model = LaplacianFormer('tiny')
        >>> outs = model(torch.rand(1, 3, 112, 137))
        >>> [tuple(o.shape) for o in outs]
        [(1, 64, 28, 35), (1, 128, 14, 18), (1, 320, 7, 9), (1, 512, 4, 5)]
    """
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
    num_stages = 4

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
                 inference_chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
                 init_cfg: Optional[Union[dict, List[dict]]] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        self.arch_settings = self._resolve_arch(arch)
        self.embed_dims: List[int] = list(self.arch_settings['embed_dims'])
        self.depths: List[int] = list(self.arch_settings['depths'])
        self.num_heads: List[int] = list(self.arch_settings['num_heads'])
        if len(conv_kernel_sizes) != 3:
            raise ValueError('conv_kernel_sizes needs 3 entries (stages 1-3),'
                             f' got {conv_kernel_sizes}')
        out_indices = tuple(out_indices)
        for index in out_indices:
            if not 0 <= index < self.num_stages:
                raise ValueError(
                    f'out_indices must lie in [0, 3], got {out_indices}')
        if not -1 <= frozen_stages <= self.num_stages:
            raise ValueError(
                f'frozen_stages must lie in [-1, 4], got {frozen_stages}')
        self.out_indices = out_indices
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        self.with_cp = with_cp
        self.pretrain_img_size = pretrain_img_size
        self.inference_chunk_tokens = inference_chunk_tokens

        band_rows = STEM_BAND_ROWS if inference_chunk_tokens else 0
        self.stem = ConvStem(
            in_channels, self.embed_dims[0], inference_band_rows=band_rows)
        self.downsamples = nn.ModuleList(
            ConvBNReLU(self.embed_dims[i], self.embed_dims[i + 1], 2)
            for i in range(self.num_stages - 1))
        self.pos_embeds = nn.ParameterList(
            nn.Parameter(
                torch.zeros(1, dims, pretrain_img_size // 2**(i + 2),
                            pretrain_img_size // 2**(i + 2)))
            for i, dims in enumerate(self.embed_dims))
        self.pos_drop = nn.Dropout(drop_rate)

        total_depth = sum(self.depths)
        rates = torch.linspace(0, drop_path_rate, total_depth).tolist()
        self.stages = nn.ModuleList()
        for i in range(self.num_stages):
            last = i == self.num_stages - 1
            attention = stage4_attention if last else linear_attention
            block_attn_cfg = dict(conv_kernel_size=0 if last else
                                  conv_kernel_sizes[i])
            block_attn_cfg.update(attn_cfg or {})
            start = sum(self.depths[:i])
            self.stages.append(
                nn.ModuleList(
                    LaplacianFormerBlock(
                        self.embed_dims[i],
                        self.num_heads[i],
                        mlp_ratio=mlp_ratio,
                        attention=attention,
                        attn_cfg=block_attn_cfg
                        if attention == 'laplacian' else None,
                        drop_path=rates[start + j],
                        drop=drop_rate,
                        inference_chunk_tokens=inference_chunk_tokens)
                    for j in range(self.depths[i])))
        for i in out_indices:
            self.add_module(f'norm{i}', nn.LayerNorm(self.embed_dims[i]))
        self._register_load_state_dict_pre_hook(self._resize_pos_embed_hook)

    @classmethod
    def _resolve_arch(cls, arch: Union[str, dict]) -> dict:
        if isinstance(arch, str):
            key = arch.lower()
            if key not in cls.arch_zoo:
                names = sorted({k for k in cls.arch_zoo if len(k) > 1})
                raise KeyError(f'LaplacianFormer: unknown arch {arch!r}; '
                               f'choose one of {names} or pass a dict with '
                               f'keys {sorted(ARCH_KEYS)}')
            return copy.deepcopy(cls.arch_zoo[key])
        if not isinstance(arch, dict) or set(arch) != ARCH_KEYS:
            raise KeyError('LaplacianFormer: a custom arch must be a dict '
                           f'with exactly the keys {sorted(ARCH_KEYS)}, got '
                           f'{arch!r}')
        for key in ARCH_KEYS:
            if len(arch[key]) != cls.num_stages:
                raise ValueError(f'LaplacianFormer: arch[{key!r}] needs 4 '
                                 f'entries, got {arch[key]}')
        return copy.deepcopy(arch)

    # ------------------------------------------------------------------ init
    def init_weights(self) -> None:
        """Initialise from scratch, or load the ``Pretrained`` checkpoint."""
        cfgs = self.init_cfg if isinstance(self.init_cfg, list) else [
            self.init_cfg
        ]
        pretrained = [
            c for c in cfgs if isinstance(c, dict)
            and c.get('type') == 'Pretrained'
        ]
        # Every parameter is initialised here, so BaseModule's generic
        # init (and its per-parameter log) is not needed.
        self._init_from_scratch()
        if pretrained:
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
        for pos_embed in self.pos_embeds:
            trunc_normal_(pos_embed, std=.02)

    def load_pretrained(self, checkpoint: str,
                        map_location: str = 'cpu') -> Tuple[list, list]:
        """Load backbone weights from a checkpoint of any supported layout.

        Args:
            checkpoint (str): Path or URL of the checkpoint.
            map_location (str): Device to load tensors onto.

        Returns:
            tuple[list, list]: Missing and unexpected keys.
        """
        raw = CheckpointLoader.load_checkpoint(
            checkpoint, map_location=map_location)
        try:
            state = filter_backbone_state_dict(raw)
        except TypeError as err:
            raise TypeError(f'{checkpoint}: {err}') from err
        missing, unexpected = self.load_state_dict(state, strict=False)
        loaded = len(state) - len(unexpected)
        if loaded == 0:
            raise RuntimeError(
                f'{checkpoint}: no tensor matches a LaplacianFormer '
                f'parameter (first keys: {list(state)[:5]}); convert it '
                'with tools/model_converters/laplacianformer_to_mmdet.py')
        print_log(
            f'LaplacianFormer: loaded {loaded} tensors from {checkpoint}; '
            f'missing {len(missing)}: {missing[:8]}; '
            f'unexpected {len(unexpected)}: {unexpected[:8]}',
            logger='current')
        return missing, unexpected

    def _resize_pos_embed_hook(self, state_dict, prefix, *args,
                               **kwargs) -> None:
        """Resize position embeddings saved on another grid (bilinear)."""
        for i, param in enumerate(self.pos_embeds):
            key = f'{prefix}pos_embeds.{i}'
            if key not in state_dict:
                continue
            saved = state_dict[key]
            if saved.shape == param.shape:
                continue
            if saved.ndim != 4 or saved.shape[1] != param.shape[1]:
                continue  # left to load_state_dict to report the mismatch
            state_dict[key] = F.interpolate(
                saved.float(),
                size=param.shape[-2:],
                mode='bilinear',
                align_corners=False).to(saved.dtype)

    # --------------------------------------------------------------- forward
    def _pos_embed(self, stage: int, hw_shape: Tuple[int,
                                                     int]) -> torch.Tensor:
        pos = self.pos_embeds[stage]
        if pos.shape[-2:] != hw_shape:
            # Channels-last in, channels-last out: the (1, N, C) token view
            # of the resized table is then contiguous.
            pos = F.interpolate(
                pos.contiguous(memory_format=torch.channels_last),
                size=hw_shape,
                mode='bilinear',
                align_corners=False)
        return pos.flatten(2).transpose(1, 2)

    def _run_block(self, block: nn.Module, x: torch.Tensor,
                   hw_shape: Tuple[int, int]) -> torch.Tensor:
        if self.with_cp and x.requires_grad:
            return cp.checkpoint(block, x, hw_shape, use_reentrant=False)
        return block(x, hw_shape)

    def _output_map(self, stage: int, tokens: torch.Tensor,
                    hw_shape: Tuple[int, int]) -> torch.Tensor:
        """Normalised tokens as a contiguous NCHW map.

        Without autograd, normalised and transposed a band of rows at a time
        (in cache) straight into the output.
        """
        norm = getattr(self, f'norm{stage}')
        batch, num_tokens, channels = tokens.shape
        height, width = hw_shape
        if not use_chunks(tokens, self.inference_chunk_tokens):
            return norm(tokens).reshape(batch, height, width,
                                        channels).permute(0, 3, 1,
                                                          2).contiguous()
        out = tokens.new_empty(batch, channels, height, width)
        rows = max(1, self.inference_chunk_tokens // width)
        for top in range(0, height, rows):
            bottom = min(top + rows, height)
            band = norm(tokens[:, top * width:bottom * width])
            out[:, :, top:bottom] = band.reshape(batch, bottom - top, width,
                                                 channels).permute(0, 3, 1, 2)
        return out

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """Return the NCHW feature maps of the stages in ``out_indices``."""
        if x.ndim != 4 or x.shape[1] != self.stem[0][0].in_channels:
            raise ValueError('LaplacianFormer expects images of shape '
                             f'(B, {self.stem[0][0].in_channels}, H, W), '
                             f'got {tuple(x.shape)}')
        outs = []
        # The stem writes channels-last, the (B, H, W, C) layout the tokens
        # use, so no stage needs a transposing copy.
        x = self.stem(x)
        for i, blocks in enumerate(self.stages):
            if i > 0:
                x = self.downsamples[i - 1](x)
            batch, channels, height, width = x.shape
            hw_shape = (height, width)
            # A view: x is channels-last.
            tokens = x.flatten(2).transpose(1, 2).contiguous()
            if torch.is_grad_enabled():
                tokens = tokens + self._pos_embed(i, hw_shape)
            else:  # x is the stem's/transition's fresh output
                tokens += self._pos_embed(i, hw_shape)
            tokens = self.pos_drop(tokens)
            for block in blocks:
                tokens = self._run_block(block, tokens, hw_shape)
            if i in self.out_indices:
                outs.append(self._output_map(i, tokens, hw_shape))
            # Tokens viewed as a channels-last map: no copy between stages.
            x = tokens.reshape(batch, height, width,
                               channels).permute(0, 3, 1, 2)
        return tuple(outs)

    # -------------------------------------------------------------- freezing
    def _frozen_modules(self) -> List[nn.Module]:
        if self.frozen_stages < 0:
            return []
        modules: List[nn.Module] = [self.stem]
        for i in range(self.frozen_stages):
            modules.append(self.stages[i])
            if i > 0:
                modules.append(self.downsamples[i - 1])
            if i in self.out_indices:
                modules.append(getattr(self, f'norm{i}'))
        return modules

    def _freeze_stages(self) -> None:
        for module in self._frozen_modules():
            module.eval()
            for param in module.parameters():
                param.requires_grad = False
        for i in range(max(self.frozen_stages, 0)):
            self.pos_embeds[i].requires_grad = False

    def train(self, mode: bool = True) -> 'LaplacianFormer':
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for module in self.modules():
                if isinstance(module, _BatchNorm):
                    module.eval()
        return self
