#!/usr/bin/env bash
# Build mmcv's CUDA extension here, where pip works, for the GPU machine:
# tools/gpu_session.sh then takes it from WHEEL_DIR (default .whl) instead of
# building mmcv there, which took 307 s of the first run's 326 s. It needs
# nvcc (CUDA_HOME, default /usr/local/cuda) but no GPU, and `make gpu-wheels`
# first (the mmcv source archive, mmengine and mmdet). About 30 minutes on
# 2 cores; run by `make gpu-mmcv`.
#
# The extension must match the GPU machine's Python, torch and GPU:
#   GPU_PYTHON   its Python's minor version here (default python3.12)
#   GPU_TORCH    its torch, local tag included (default 2.11.0+cu130)
#   GPU_TORCH_INDEX  an extra pip index that has that build, e.g.
#                https://download.pytorch.org/whl/cu130 (default none)
#   GPU_ARCH     its compute capability as the probe there names it
#                (default 9.0a: the H200; 9.0 builds sm_90 without the
#                architecture-specific features)
# GPU_PREBUILD_DIR (default build/gpu_mmcv) holds the environment and the
# build, so that a second run rebuilds only what changed; MAX_JOBS as for
# mmcv's setup.py.
set -uo pipefail

cd "$(dirname "$0")/../.." || exit 1
wheels=${WHEEL_DIR:-.whl}
work=${GPU_PREBUILD_DIR:-build/gpu_mmcv}
python=${GPU_PYTHON:-python3.12}
torch_build=${GPU_TORCH:-2.11.0+cu130}
arch=${GPU_ARCH:-9.0a}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

die() { echo "prebuild_mmcv: $*" >&2; exit 1; }

sdists=("${wheels}"/mmcv-*.tar.gz)
[ -e "${sdists[0]}" ] || die "no mmcv source archive in ${wheels}/: run make gpu-wheels first"
carried=("${wheels}"/*.whl)
[ -e "${carried[0]}" ] || die "no wheels in ${wheels}/: run make gpu-wheels first"
[ -x "${CUDA_HOME}/bin/nvcc" ] || die "no nvcc in ${CUDA_HOME}/bin (set CUDA_HOME)"
command -v "${python}" >/dev/null 2>&1 ||
  die "no ${python} here: set GPU_PYTHON to a Python of the GPU machine's minor version"

venv=${work}/venv
has_torch() {
  "${venv}/bin/python" -c "import sys, torch; sys.exit(torch.__version__ != '${torch_build}')" \
    2>/dev/null
}
if ! has_torch; then
  echo "== torch ${torch_build} and mmcv's requirements for $("${python}" -V) in ${venv}"
  index=()
  [ -n "${GPU_TORCH_INDEX:-}" ] && index=(--extra-index-url "${GPU_TORCH_INDEX}")
  "${python}" -m venv "${venv}" || die "cannot make a virtual environment in ${venv}"
  # setuptools < 81: mmcv's setup.py imports pkg_resources.
  "${venv}/bin/pip" install -q --disable-pip-version-check "${index[@]}" \
    "torch==${torch_build}" numpy ninja 'setuptools<81' opencv-python-headless pillow \
    pyyaml packaging rich matplotlib scipy ||
    die "pip could not install torch ${torch_build} (GPU_TORCH_INDEX names an index that has it)"
  # The packages the GPU machine gets, as it gets them: mmcv's last check
  # imports mmengine and mmdet.
  "${venv}/bin/pip" install -q --disable-pip-version-check --no-deps "${carried[@]}" ||
    die "cannot install the wheels of ${wheels}/"
  has_torch || die "the environment has no torch ${torch_build}"
fi

# The GPU machine's CUDA image has every CUDA header; a toolkit here may lack
# those of the libraries that torch's wheels bring (cusparse.h, included by
# ATen/cuda/CUDAContext.h): the wheels' own headers serve instead.
mapfile -t dirs < <(find "${venv}/" -type d -path '*/site-packages/nvidia/*/include' | sort)
includes=$(IFS=:; echo "${dirs[*]}")
cuda_args=${dirs[*]/#/-I}

marker=${work}/build-started
touch "${marker}" || exit 1
echo "== mmcv's CUDA extension for torch ${torch_build}, sm ${arch} ($(nproc) cores: about" \
  "$((60 / $(nproc))) minutes)"
PYTHON="${venv}/bin/python" TORCH_CUDA_ARCH_LIST="${arch}" CPATH="${includes}" \
  MMCV_CUDA_ARGS="${cuda_args}" MAX_JOBS=${MAX_JOBS:-$(nproc)} \
  bash tools/gpu/build_mmcv.sh "${sdists[0]}" "${work}/mmcv-build" "${work}/mmcv-install" \
  "${wheels}" || exit 1
# gpu_session.sh takes the first prebuilt it finds: keep this one only.
find "${wheels}" -maxdepth 1 -name 'mmcv-*-ext-*.so.gz' ! -newer "${marker}" -delete
ls -l "${wheels}"/mmcv-*-ext-*.so.gz
