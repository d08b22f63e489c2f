#!/usr/bin/env bash
# The adapters' tests in an environment of their own: the torch-only core
# with timm, Hugging Face transformers and segmentation-models-pytorch, and
# none of the OpenMMLab stack (transformers 5 breaks mmpretrain 1.2.0's
# import, so the two cannot share an environment).
#
#   bash tools/test_adapters.sh [pytest options...]    (or: make test-adapters)
#
# Creates the virtual environment ADAPTERS_VENV (default .venv-adapters,
# from PYTHON, default python3) on the first run and brings it to
# requirements/constraints/adapters.txt on every run (quick when nothing
# changed), builds mmlaplacian's extension and installs the package there in
# editable mode, then runs tests/adapters and tests/test_torch_only_core.py
# in it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${ADAPTERS_VENV:-.venv-adapters}
CONSTRAINTS=requirements/constraints/adapters.txt

step() { printf '\n==> %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
  step "virtual environment $VENV"
  "$PY" -m venv "$VENV"
fi
VPY=$VENV/bin/python
pip_install() { "$VPY" -m pip install --disable-pip-version-check -q -c "$CONSTRAINTS" "$@"; }

step "torch, timm, transformers, segmentation-models-pytorch, the test tools ($CONSTRAINTS)"
pip_install torch torchvision -r requirements/build.txt -r requirements/runtime.txt \
  -r requirements/adapters.txt -r requirements/tests.txt

step "mmlaplacian, the torch-only core, and its extension"
# As tools/install.sh builds it: in place, so that a second run recompiles
# nothing; the environments' torch being the same release, the extension
# serves both.
"$VPY" setup.py -q build_ext --inplace
MMLAPLACIAN_NO_EXT=1 pip_install --no-build-isolation --no-deps -e .
# What these tests cover is the core without the OpenMMLab stack.
"$VPY" - <<'PYEOF'
import importlib.util, sys
present = [n for n in ('mmengine', 'mmcv', 'mmdet', 'mmseg', 'mmpretrain')
           if importlib.util.find_spec(n)]
sys.exit(f'{sys.prefix} holds {present}: the adapters are tested without '
         'the OpenMMLab stack' if present else 0)
PYEOF

step "tests/adapters and tests/test_torch_only_core.py"
OMP_WAIT_POLICY=PASSIVE "$VPY" -m pytest tests/adapters tests/test_torch_only_core.py -q "$@"
