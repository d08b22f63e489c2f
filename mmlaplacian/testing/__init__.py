"""Synthetic datasets for the quick starts and the tests: deterministic
scenes of shape classes as COCO instances (:mod:`.synthetic_shapes`) and as
label maps (:mod:`.synthetic_seg`). Needs numpy, Pillow and OpenCV only."""
