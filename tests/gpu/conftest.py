"""The GPU acceptance tests: CUDA against the CPU, AMP training, the CUDA
build. Every test is marked ``cuda`` and skipped without a CUDA device."""
import os.path as osp
import sys

# pytest runs with --import-mode=importlib, which puts no test folder on
# sys.path: make gpu_utils beside this file importable by name.
sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
