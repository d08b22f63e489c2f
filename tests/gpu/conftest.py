"""The GPU acceptance tests: CUDA against the CPU, AMP training, the CUDA
build, the sanitizers on planted bugs. Every GPU test is marked ``cuda`` and
skipped without a CUDA device; the tests of the acceptance run's own tools
(``tools/gpu_check.sh`` and its helpers) run on any machine."""
import os.path as osp
import sys

# pytest runs with --import-mode=importlib, which puts no test folder on
# sys.path: make gpu_utils beside this file importable by name.
sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
