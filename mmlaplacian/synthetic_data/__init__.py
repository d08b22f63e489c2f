"""Synthetic datasets for the quick starts and the tests: deterministic
scenes of shape classes as COCO instances (:mod:`.instances`) and as
label maps (:mod:`.label_maps`). Needs numpy, Pillow and OpenCV only."""
