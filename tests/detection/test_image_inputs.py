"""Unusual image files through the configs' real pipelines and detector:
grayscale, RGBA and 16-bit images load as 3-channel 8-bit colour, a
truncated JPEG is an error naming the file, images under 32 pixels are
predicted on (and left out of training with a warning)."""
import copy
import functools
import json

import cv2
import numpy as np
import pytest
import torch
from detection_utils import MASK_RCNN_CONFIG
from mmcv.transforms import Compose
from mmdet.registry import DATASETS, MODELS, TRANSFORMS
from mmengine.config import Config
from mmengine.dataset import pseudo_collate
from mmengine.registry import init_default_scope
from PIL import Image

from mmlaplacian.datasets import SmallImagesWarning

COLOUR = (200, 40, 90)  # R, G, B of the square
SQUARE = (20, 12, 60, 52)  # x1, y1, x2, y2


def scene(height: int, width: int, square=SQUARE) -> np.ndarray:
    """An RGB image: a coloured square on a dark background."""
    image = np.full((height, width, 3), 20, dtype=np.uint8)
    x1, y1, x2, y2 = square
    image[y1:y2, x1:x2] = COLOUR
    return image


def write_images(folder) -> dict:
    """``{file name: (width, height, square)}`` of the test images."""
    rgb = scene(80, 96)
    Image.fromarray(rgb).convert('L').save(folder / 'gray.jpg', quality=95)
    rgba = np.dstack([rgb, np.full(rgb.shape[:2], 30, np.uint8)])
    Image.fromarray(rgba, 'RGBA').save(folder / 'rgba.png')
    deep = rgb.astype(np.uint16) * 257 + 100  # 16 bits, 8-bit value v*257
    assert cv2.imwrite(str(folder / 'deep.png'), deep[..., ::-1])
    small_square = (4, 3, 14, 11)
    Image.fromarray(scene(20, 24, small_square)).save(
        folder / 'small.jpg', quality=95)
    Image.fromarray(rgb).save(folder / 'whole.jpg', quality=95)
    data = (folder / 'whole.jpg').read_bytes()
    (folder / 'truncated.jpg').write_bytes(data[:len(data) * 6 // 10])
    sizes = {name: (96, 80, SQUARE) for name in
             ('gray.jpg', 'rgba.png', 'deep.png', 'truncated.jpg')}
    sizes['small.jpg'] = (24, 20, small_square)
    return sizes


@pytest.fixture(scope='module')
def image_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp('image_inputs')
    sizes = write_images(folder)
    images, annotations = [], []
    for image_id, (name, (width, height, square)) in enumerate(
            sizes.items(), start=1):
        images.append(dict(id=image_id, file_name=name, width=width,
                           height=height))
        x1, y1, x2, y2 = square
        annotations.append(dict(
            id=image_id, image_id=image_id, category_id=2, iscrowd=0,
            bbox=[x1, y1, x2 - x1, y2 - y1], area=(x2 - x1) * (y2 - y1),
            segmentation=[[x1, y1, x2, y1, x2, y2, x1, y2]]))
    categories = [dict(id=i, name=n) for i, n in enumerate(
        ('circle', 'square', 'triangle', 'star'), start=1)]
    ann_file = folder / 'instances.json'
    ann_file.write_text(json.dumps(dict(
        images=images, annotations=annotations, categories=categories)))
    return folder


@functools.lru_cache(maxsize=None)
def load_config() -> Config:
    return Config.fromfile(MASK_RCNN_CONFIG)


def dataset(folder, split: str):
    cfg = load_config()
    init_default_scope('mmdet')
    loader = cfg.train_dataloader if split == 'train' else cfg.test_dataloader
    data = copy.deepcopy(loader.dataset)
    data.update(data_root=str(folder), ann_file='instances.json',
                data_prefix=dict(img=''))
    return DATASETS.build(data)


def index_of(data, name: str) -> int:
    return next(i for i in range(len(data))
                if data.get_data_info(i)['img_path'].endswith(name))


@pytest.mark.parametrize('name', ['gray.jpg', 'rgba.png', 'deep.png',
                                  'small.jpg'])
def test_image_loads_as_three_channel_colour(name, image_folder):
    data = dataset(image_folder, 'test')
    info = data.get_data_info(index_of(data, name))
    load = data.pipeline.transforms[0]  # the config's LoadImageFromFile
    image = load(copy.deepcopy(info))['img']
    width, height = info['width'], info['height']
    assert image.shape == (height, width, 3) and image.dtype == np.uint8
    x1, y1, x2, y2 = (int(v) for v in info['instances'][0]['bbox'])
    inside = image[y1 + 1:y2 - 1, x1 + 1:x2 - 1].reshape(-1, 3).mean(0)
    outside = image[:y1 - 1].reshape(-1, 3).mean(0)
    bgr = np.array(COLOUR[::-1], dtype=float)
    if name == 'gray.jpg':
        # Grey replicated to three channels: the square's luminance.
        luma = 0.299 * COLOUR[0] + 0.587 * COLOUR[1] + 0.114 * COLOUR[2]
        assert np.allclose(inside, luma, atol=4), inside
    else:
        # Colour kept, alpha dropped (not blended), 16 bits scaled to 8.
        assert np.allclose(inside, bgr, atol=4), inside
    assert np.allclose(outside, 20, atol=4), outside


def test_unusual_images_reach_the_detector(image_folder):
    # The whole test pipeline and a (random) detector take them in one
    # batch: boxes are finite and inside each original image.
    names = ['gray.jpg', 'rgba.png', 'deep.png', 'small.jpg']
    data = dataset(image_folder, 'test')
    samples = [data[index_of(data, name)] for name in names]
    assert all(s['inputs'].shape[0] == 3 for s in samples)
    for name, result in zip(names, predict(samples)):
        info = data.get_data_info(index_of(data, name))
        width, height = info['width'], info['height']
        pred = result.pred_instances
        boxes = pred.bboxes
        assert len(boxes) > 0 and torch.isfinite(boxes).all(), name
        assert (boxes[:, 0::2] >= 0).all() and (boxes[:, 0::2] <= width).all()
        assert (boxes[:, 1::2] >= 0).all() and (
            boxes[:, 1::2] <= height).all()
        assert tuple(pred.masks.shape[1:]) == (height, width), name


_DETECTOR = {}


def predict(samples):
    """Predictions of a randomly initialised test Mask R-CNN (every box)."""
    if 'model' not in _DETECTOR:
        cfg = copy.deepcopy(load_config())
        init_default_scope('mmdet')
        cfg.model.test_cfg.rcnn.score_thr = 0.0
        torch.manual_seed(0)
        model = MODELS.build(cfg.model)
        model.init_weights()
        _DETECTOR['model'] = model.eval()
    with torch.no_grad():
        return _DETECTOR['model'].test_step(pseudo_collate(samples))


def test_truncated_jpeg_names_the_file(image_folder):
    data = dataset(image_folder, 'test')
    index = index_of(data, 'truncated.jpg')
    with pytest.raises(AssertionError,
                       match='failed to load image: .*truncated.jpg'):
        data[index]


def test_small_image_at_its_own_size(image_folder):
    # Resized to its own size (the config's resize enlarges it), the
    # detector sees the 24 x 20 image itself, padded to 32: it still
    # predicts boxes inside the image.
    data = dataset(image_folder, 'test')
    own_size = TRANSFORMS.build(dict(type='Resize', scale=(24, 20),
                                     keep_ratio=True))
    steps = [own_size if type(t).__name__ == 'Resize' else t
             for t in data.pipeline.transforms]
    info = copy.deepcopy(data.get_data_info(index_of(data, 'small.jpg')))
    sample = Compose(steps)(info)
    assert tuple(sample['inputs'].shape) == (3, 20, 24)
    boxes = predict([sample])[0].pred_instances.bboxes
    assert len(boxes) > 0 and torch.isfinite(boxes).all()
    assert (boxes[:, 0::2] <= 24).all() and (boxes[:, 1::2] <= 20).all()


def test_small_images_are_left_out_of_training_with_a_warning(image_folder):
    with pytest.warns(SmallImagesWarning,
                      match=r'1 of 5 images are smaller than '
                      r"filter_cfg.min_size=32 pixels .*\['small.jpg'\]"):
        data = dataset(image_folder, 'train')
    names = [data.get_data_info(i)['img_path'] for i in range(len(data))]
    assert len(names) == 4
    assert not any(n.endswith('small.jpg') for n in names)
