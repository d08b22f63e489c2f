"""Datasets shipped with mmlaplacian (generators; no registry entries)."""
from .synthetic_shapes import (SHAPE_CLASSES, is_complete, make_scene,
                               make_synthetic_coco)

__all__ = ['SHAPE_CLASSES', 'is_complete', 'make_scene', 'make_synthetic_coco']
