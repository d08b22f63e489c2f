"""Paths shared by the segmentation tests."""
import os.path as osp

HERE = osp.dirname(osp.abspath(__file__))
# The quick-start Semantic FPN shrunk for tests (reads $SYNTHETIC_SEG).
SEG_CONFIG = osp.join(HERE, 'configs', 'sem_fpn_synthetic.py')
