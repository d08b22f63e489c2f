"""Calibration inputs for static int8 quantization, read from image files.

Both int8 paths (PT2E for ExecuTorch, onnxruntime's static QDQ) observe the
activations of a few representative inputs to fix each tensor's scale. The
inputs here are images from a folder (the quick starts' training images by
default), brought to the exported program's static size the way an mmdet /
mmseg test pipeline does: resized with the aspect ratio kept to fit inside
``(H, W)``, then padded at the bottom and right with zeros.
"""
from __future__ import annotations

import os
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.bmp')
# mmpretrain / timm ImageNet statistics (RGB, 0-255): what a backbone alone
# was trained to see.
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


def image_files(folder: str, count: Optional[int] = None) -> List[str]:
    """The image files of ``folder`` (recursively, sorted), at most
    ``count`` of them, spread evenly over the sorted list.

    Raises:
        FileNotFoundError: ``folder`` does not exist or holds no image.
    """
    if not os.path.isdir(folder):
        raise FileNotFoundError(
            f'calibration images: {folder!r} is not a directory')
    files = sorted(
        os.path.join(root, name) for root, _, names in os.walk(folder)
        for name in names if name.lower().endswith(IMAGE_SUFFIXES))
    if not files:
        raise FileNotFoundError(
            f'calibration images: no {"/".join(IMAGE_SUFFIXES)} file under '
            f'{folder!r}')
    if count is not None and 0 < count < len(files):
        step = len(files) / count
        files = [files[int(i * step)] for i in range(count)]
    return files


def training_images_folder(cfg) -> str:
    """The image folder of a config's training set: where calibration
    images come from by default (``data/synthetic_coco/train/`` for the
    detection quick start).

    Args:
        cfg (Config): An mmdet or mmseg config.

    Raises:
        ValueError: The config has no training set with an image folder.
    """
    dataset = cfg.get('train_dataloader', {}).get('dataset', {})
    while 'dataset' in dataset:  # dataset wrappers (RepeatDataset, ...)
        dataset = dataset['dataset']
    prefix = dataset.get('data_prefix', {}) or {}
    images = prefix.get('img', prefix.get('img_path'))
    if images is None:
        raise ValueError(
            'the config has no train_dataloader.dataset.data_prefix with '
            'an image folder (img or img_path): give the calibration '
            'images\' folder')
    return os.path.join(dataset.get('data_root', '') or '', images)


def load_bgr(path: str) -> torch.Tensor:
    """An image file as ``(3, h, w)`` float32, BGR, 0-255 (as mmcv's
    ``LoadImageFromFile`` loads it)."""
    from PIL import Image
    with Image.open(path) as image:
        rgb = np.asarray(image.convert('RGB'), dtype=np.float32)
    return torch.from_numpy(rgb[..., ::-1].copy()).permute(2, 0, 1)


def fit_and_pad(image: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """``(3, h, w)`` → ``(1, 3, H, W)``: resized with the aspect ratio kept
    to fit inside ``shape``, then zero-padded at the bottom and right."""
    height, width = int(shape[0]), int(shape[1])
    scale = min(height / image.shape[1], width / image.shape[2])
    size = (max(1, min(height, round(image.shape[1] * scale))),
            max(1, min(width, round(image.shape[2] * scale))))
    resized = F.interpolate(image[None], size=size, mode='bilinear',
                            align_corners=False)
    return F.pad(resized, (0, width - size[1], 0, height - size[0]))


def calibration_inputs(folder: str,
                       shape: Sequence[int],
                       count: int = 32,
                       normalize: bool = False) -> List[Tuple[torch.Tensor]]:
    """Calibration inputs from the images of ``folder``.

    Args:
        folder (str): Image folder (e.g. ``data/synthetic_coco/train``).
        shape (Sequence[int]): The program's input ``(H, W)``.
        count (int): How many images (spread over the folder).
        normalize (bool): ``False`` for a detector's or segmentor's program
            (BGR, 0-255: the program normalises); ``True`` for a backbone
            alone (RGB, ImageNet mean and std, as it was trained).

    Returns:
        list[tuple[Tensor]]: One ``(image,)`` argument tuple per file,
        each ``(1, 3, H, W)`` float32.
    """
    inputs = []
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    for path in image_files(folder, count):
        image = fit_and_pad(load_bgr(path), shape)
        if normalize:
            image = (image.flip(1) - mean) / std
        inputs.append((image.contiguous(), ))
    return inputs


__all__ = [
    'calibration_inputs', 'fit_and_pad', 'image_files', 'load_bgr',
    'training_images_folder'
]
