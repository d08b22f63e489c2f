#!/usr/bin/env bash
# One-command set-up of mmlaplacian into the active Python environment.
#
#   bash tools/install.sh                 (or: make install)
#   STACK=onedl bash tools/install.sh     (or: make install STACK=onedl)
#
# STACK picks the OpenMMLab stack: 'upstream' (default: mmcv 2.1.0, mmdet
# 3.3.0, ...; no release since 2024) or 'onedl' (the maintained fork, same
# import names). The exact versions of each come from
# requirements/constraints/<STACK>.txt; the other stack's distributions are
# removed first, as both install the same modules.
#
# Installs torch 2.13.0 + torchvision 0.28.0 only when no torch is present (an
# existing torch >= 2.3 is kept, with a torchvision that pairs with it), the
# build tools, mmengine, mmcv compiled with ops (skipped when the stack's mmcv
# whose mmcv._ext loads is already installed), mmdet, mmpretrain,
# mmsegmentation, timm, pycocotools, the ONNX tools, ExecuTorch (beside
# torch 2.13) and the test tools, then builds mmlaplacian's own extension and
# installs the package in editable mode. Safe to run again.
#
# Environment: PYTHON (interpreter, default python3), STACK, FORCE_CUDA=1
# (build our CUDA kernels), TORCH_CUDA_ARCH_LIST (default
# 7.5;8.0;8.6;8.9;9.0), MAX_JOBS (parallel compile jobs).
set -euo pipefail

cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
STACK=${STACK:-upstream}
case "$STACK" in
  upstream) DIST_PREFIX=''; STACK_EXTRAS=(mmdet mmseg mmpretrain) ;;
  onedl) DIST_PREFIX='onedl-'; STACK_EXTRAS=(onedl) ;;
  *) printf 'ERROR: unknown STACK=%s\nFIX:   use STACK=upstream (the default) or STACK=onedl\n' "$STACK" >&2
     exit 1 ;;
esac
CONSTRAINTS=requirements/constraints/$STACK.txt
# Every distribution of either stack: they install the same modules (mmcv,
# mmengine, mmdet, mmseg, mmpretrain), OpenCV's two wheels share cv2/, and
# the fork's mmdet brings imaug, which caps OpenCV below 4.13.
STACK_DISTS='mmcv mmcv-full mmcv-lite mmengine mmengine-lite mmdet mmsegmentation mmpretrain
  onedl-mmcv onedl-mmengine onedl-mmdetection onedl-mmsegmentation onedl-mmpretrain
  imaug imagecorruptions-imaug opencv-python opencv-python-headless'
# The version CONSTRAINTS pins for a distribution.
pinned() {
  local version
  version=$(sed -n "s/^$1==\([^ #;]*\).*/\1/p" "$CONSTRAINTS" | tr -d '\r')
  [ -n "$version" ] || { printf 'ERROR: %s pins no version of %s\n' "$CONSTRAINTS" "$1" >&2; exit 1; }
  echo "$version"
}
MMCV_DIST=${DIST_PREFIX}mmcv
MMCV_VERSION=$(pinned "$MMCV_DIST")
MMENGINE_SPEC="${DIST_PREFIX}mmengine==$(pinned "${DIST_PREFIX}mmengine")"
# '===' asks for the PyPI build of 2.13.0 (CUDA 13; runs on CPU too), not the
# local CPU-only 2.13.0+cpu wheel, whose torchvision does not exist on PyPI.
TORCH_SPEC='torch===2.13.0'
TORCHVISION_SPEC='torchvision==0.28.0'

step() { printf '\n==> %s\n' "$*"; }
die() {
  printf '\nERROR: %s\n' "$1" >&2
  [ $# -gt 1 ] && printf 'FIX:   %s\n' "$2" >&2
  exit 1
}
pip_install() { "$PY" -m pip install --disable-pip-version-check "$@"; }
torchvision_works() {
  "$PY" -c 'import torch, torchvision.ops; torchvision.ops.nms(torch.zeros(1, 4), torch.ones(1), 0.5)' 2>/dev/null
}

command -v "$PY" >/dev/null 2>&1 || die "no Python interpreter '$PY'" \
  "activate a Python >= 3.11 environment or set PYTHON=/path/to/python"
# The tested versions (requirements/constraints/) need Python >= 3.11 (numpy
# 2.4, matplotlib 3.11) and a torch built for numpy 2 (>= 2.3). The core
# alone installs on older ones: pip install --no-build-isolation .
"$PY" - <<'PYEOF' || die "Python >= 3.11 is required by the tested versions" "use a Python 3.11 or 3.12 environment (3.11 is tested)"
import sys
sys.exit(0 if sys.version_info >= (3, 11) else 1)
PYEOF
echo "Python: $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"

step "torch and torchvision"
# mmpretrain needs torchvision, and PyPI's torchvision wheels only load beside
# PyPI's (CUDA) torch builds. torch 2.14 needs C++20, which mmcv 2.1.0's build
# does not use, so a fresh environment gets torch 2.13.0 with torchvision 0.28.0.
if torch_version=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null); then
  "$PY" - "$torch_version" <<'PYEOF' || die "torch $torch_version is too old (>= 2.3 needed, for numpy 2)" "pip install \"$TORCH_SPEC\" \"$TORCHVISION_SPEC\""
import sys
major, minor = (int(p) for p in sys.argv[1].split('+')[0].split('.')[:2])
sys.exit(0 if (major, minor) >= (2, 3) else 1)
PYEOF
  echo "keeping the installed torch $torch_version"
  if ! torchvision_works; then
    # torchvision 0.(m+15) pairs with torch 2.m.
    tv_minor=$("$PY" -c "import torch; print(int(torch.__version__.split('.')[1]) + 15)")
    echo "installing the torchvision that pairs with torch $torch_version (0.$tv_minor.*)"
    pip_install --no-deps "torchvision==0.$tv_minor.*" || true
    # A torchvision whose compiled ops do not load breaks imports: remove it.
    torchvision_works || "$PY" -m pip uninstall -y -q torchvision || true
    torchvision_works || die "no working torchvision for torch $torch_version (mmpretrain needs one)" \
      "install a matching pair, e.g.: pip install \"$TORCH_SPEC\" \"$TORCHVISION_SPEC\" (then run this again)"
  fi
else
  echo "no torch found: installing $TORCH_SPEC $TORCHVISION_SPEC"
  pip_install "$TORCH_SPEC" "$TORCHVISION_SPEC" || die "torch install failed" \
    "install a torch >= 2.3 with its torchvision for your platform first, then run this again"
fi
torchvision_works || die "torchvision does not work beside torch" "pip install \"$TORCH_SPEC\" \"$TORCHVISION_SPEC\""

step "build tools (setuptools>=80,<81, wheel, ninja)"
pip_install -c "$CONSTRAINTS" -r requirements/build.txt

step "OpenMMLab stack: $STACK ($CONSTRAINTS)"
# Installed distributions of STACK_DISTS, and whether any belongs to the
# other stack. Switching removes them all (files the two stacks share would
# otherwise be half deleted); pip's cache makes the reinstall quick.
read -r switching installed < <("$PY" - "$DIST_PREFIX" "$STACK_DISTS" <<'PYEOF'
import importlib.metadata as metadata, sys
prefix, names = sys.argv[1], sys.argv[2].split()
found = []
for name in names:
    try:
        metadata.version(name)
        found.append(name)
    except metadata.PackageNotFoundError:
        pass
fork = lambda n: n.startswith('onedl-') or 'imaug' in n
ours = lambda n: n.startswith('opencv') or fork(n) == bool(prefix)
print(int(any(not ours(n) for n in found)), ' '.join(found))
PYEOF
)
if [ "$switching" = 1 ]; then
  echo "switching stacks: removing $installed"
  # shellcheck disable=SC2086  # one word per distribution
  "$PY" -m pip uninstall -y -q $installed
fi

step "mmengine"
pip_install -c "$CONSTRAINTS" "$MMENGINE_SPEC"

step "$MMCV_DIST $MMCV_VERSION with ops"
if "$PY" -c "import importlib.metadata as m, mmcv._ext; assert m.version('$MMCV_DIST') == '$MMCV_VERSION'" 2>/dev/null; then
  echo "$MMCV_DIST $MMCV_VERSION with a loadable mmcv._ext is already installed: skipping the build"
else
  echo "Compiling $MMCV_DIST $MMCV_VERSION with ops from source against the installed torch."
  echo "This takes about 14 minutes on 2 cores (pip caches the wheel: later installs are fast)."
  reinstall=()
  "$PY" -c 'import mmcv' 2>/dev/null && reinstall=(--force-reinstall --no-deps)
  MMCV_WITH_OPS=1 MAX_JOBS=${MAX_JOBS:-$(nproc)} pip_install --no-build-isolation -c "$CONSTRAINTS" \
    "${reinstall[@]}" "$MMCV_DIST==$MMCV_VERSION" || die "the mmcv build failed (see the compiler output above)" \
    "check that gcc/g++ and the Python headers are installed (apt-get install build-essential python3-dev)"
  if ! "$PY" -c 'import mmcv._ext' 2>/dev/null; then
    # pip's wheel cache may hold an mmcv built against another torch.
    echo "the cached mmcv wheel was built against another torch: dropping it and rebuilding"
    "$PY" -m pip cache remove "${MMCV_DIST//-/_}-*" || true
    "$PY" -m pip cache remove "$MMCV_DIST-*" || true
    MMCV_WITH_OPS=1 MAX_JOBS=${MAX_JOBS:-$(nproc)} pip_install --no-build-isolation -c "$CONSTRAINTS" \
      --force-reinstall --no-deps "$MMCV_DIST==$MMCV_VERSION" || die "the mmcv build failed"
  fi
  "$PY" -c 'import mmcv._ext' || die "mmcv was built but mmcv._ext does not load" \
    "rebuild it: MMCV_WITH_OPS=1 pip install --no-build-isolation --no-cache-dir --force-reinstall $MMCV_DIST==$MMCV_VERSION"
fi

step "mmdet, mmpretrain, mmsegmentation, timm, pycocotools, ONNX export tools and the test tools"
requirement_files=()
for extra in "${STACK_EXTRAS[@]}" timm deploy tests; do
  requirement_files+=(-r "requirements/$extra.txt")
done
pip_install -c "$CONSTRAINTS" -r requirements/runtime.txt "${requirement_files[@]}"

step "ExecuTorch: executorch and torchao"
# An executorch release pairs with one torch release (1.5 with 2.13). Its
# own requirements serve its other backends and tools, and would change the
# environment around torch: requirements/executorch.txt lists what the
# export and the runtime need, installed without dependencies.
torch_version=$("$PY" -c 'import torch; print(torch.__version__)')
if [[ $torch_version == 2.13.* ]]; then
  pip_install --no-deps -c "$CONSTRAINTS" -r requirements/executorch.txt
  with_executorch=1
else
  echo "skipped: executorch 1.5 pairs with torch 2.13, this is torch $torch_version"
  echo "(tools/deployment/export_executorch.py needs the executorch release that pairs with it)"
  with_executorch=0
fi

step "mmlaplacian and its extensions (mmlaplacian._ext; with executorch, mmlaplacian._executorch_kernels)"
if [ "${FORCE_CUDA:-0}" = "1" ]; then
  echo "FORCE_CUDA=1: compiling the CUDA kernels too (TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-7.5;8.0;8.6;8.9;9.0})"
fi
# An in-place build is incremental (ninja): a second run recompiles nothing.
"$PY" setup.py -q build_ext --inplace || die "building mmlaplacian._ext or mmlaplacian._executorch_kernels failed (see above)" \
  "check the compiler output; FORCE_CUDA=1 needs a CUDA build of torch and nvcc"
# Checked from / so that the source folder on sys.path does not answer for it.
if ! (cd / && "$PY" -c "import mmlaplacian, os, sys; sys.exit(not os.path.samefile(os.path.dirname(mmlaplacian.__file__), '$PWD/mmlaplacian'))") 2>/dev/null; then
  MMLAPLACIAN_NO_EXT=1 pip_install --no-build-isolation --no-deps -e .
fi

step "check"
"$PY" -c "import mmcv.ops, mmdet.models, mmpretrain.models, mmseg.models, timm, mmlaplacian._ext" \
  || die "the installed stack does not import" "read the error above; rerun bash tools/install.sh"
if [ "$with_executorch" = 1 ]; then
  "$PY" -c "import torch, executorch.exir, executorch.runtime; assert torch.__version__ == '$torch_version'" \
    || die "executorch does not import beside torch $torch_version" "read the error above; rerun bash tools/install.sh"
  "$PY" -c "from mmlaplacian.deployment.executorch_kernels import load_executorch_kernels; load_executorch_kernels()" \
    || die "mmlaplacian._executorch_kernels does not load" "read the error above; rerun bash tools/install.sh"
fi
"$PY" -m mmlaplacian.info
echo
echo "mmlaplacian is installed. Quick start: make demo    Tests: make test"
