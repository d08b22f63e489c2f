#!/usr/bin/env bash
# Build mmcv's ops with CUDA from its source archive and install mmcv into a
# folder on PYTHONPATH (the GPU machine has no mmcv and no network).
#
#   tools/gpu/build_mmcv.sh SDIST BUILD_DIR DEST ARTIFACT_DIR [PREBUILT]
#
# PREBUILT is the extension an earlier run left in ARTIFACT_DIR (stripped and
# gzipped, named for its mmcv, torch and GPU architectures): when it matches
# this torch and TORCH_CUDA_ARCH_LIST and loads, the build is skipped (about
# 3 minutes on 16 cores). Otherwise the build writes one such file.
# Needs setuptools < 81 on PYTHONPATH (mmcv's setup.py imports pkg_resources)
# and honours MAX_JOBS.
set -uo pipefail

die() { echo "build_mmcv: $*" >&2; exit 1; }
[ $# -ge 4 ] || die "usage: build_mmcv.sh SDIST BUILD_DIR DEST ARTIFACT_DIR [PREBUILT]"
sdist=$1 build_dir=$2 dest=$3 artifacts=$4 prebuilt=${5:-}
PYTHON=${PYTHON:-python3}
[ -f "${sdist}" ] || die "no mmcv source archive at ${sdist} (make gpu-wheels)"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:?set TORCH_CUDA_ARCH_LIST, e.g. 9.0}

torch_version=$("${PYTHON}" -c 'import torch; print(torch.__version__)') ||
  die "cannot import torch with ${PYTHON}"
arch_tag=
IFS='; ' read -ra archs <<<"${TORCH_CUDA_ARCH_LIST}"
for arch in "${archs[@]}"; do
  arch=${arch%+PTX}
  arch_tag+=${arch_tag:+-}sm${arch/./}
done
# e.g. mmcv-2.1.0-ext-torch2.11.0-cu130-sm90.so.gz ('+' is not allowed in
# the names of files that come back from the GPU machine).
name="$(basename "${sdist}" .tar.gz)-ext-torch${torch_version//+/-}-${arch_tag}.so.gz"
suffix=$("${PYTHON}" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")

mkdir -p "${build_dir}" "${dest}" "${artifacts}" || exit 1
tar -xzf "${sdist}" -C "${build_dir}" || die "cannot unpack ${sdist}"
src=$(find "${build_dir}" -mindepth 1 -maxdepth 1 -type d -name 'mmcv-*' | head -n 1)
[ -n "${src}" ] || die "no mmcv-* folder in ${sdist}"

# The check: mmcv loads its ops, built with CUDA, and runs one on the GPU. A
# line per stage (and faulthandler) say where a crash in native code was.
check_program="
import torch, mmcv
print('check: mmcv imported', flush=True)
import mmcv._ext
print('check: mmcv._ext loaded', flush=True)
from mmcv.ops import get_compiling_cuda_version, nms
cuda = get_compiling_cuda_version()
assert cuda != 'not available', 'mmcv._ext was built without CUDA'
boxes = torch.tensor([[0., 0, 10, 10], [1, 1, 10, 10]])
scores = torch.tensor([0.9, 0.8])
nms(boxes, scores, 0.5)
print('check: nms ran on the CPU', flush=True)
if torch.cuda.is_available():
    nms(boxes.cuda(), scores.cuda(), 0.5)
    torch.cuda.synchronize()
    print('check: nms ran on the GPU', flush=True)
print('mmcv', mmcv.__version__, 'with CUDA', cuda, 'ops')"

check() {  # check DIR: mmcv there passes the check
  (cd / && PYTHONPATH="$1${PYTHONPATH:+:${PYTHONPATH}}" "${PYTHON}" -X faulthandler \
    -c "${check_program}")
}

backtrace() {  # backtrace DIR: the check again under gdb, for the native stack
  command -v gdb >/dev/null 2>&1 || { echo "build_mmcv: no gdb here for a native backtrace"; return; }
  echo "build_mmcv: the check under gdb:"
  local python  # gdb needs the binary, not a wrapper such as pyenv's shim
  python=$("${PYTHON}" -c 'import sys; print(sys.executable)') || return
  (cd / && PYTHONPATH="$1${PYTHONPATH:+:${PYTHONPATH}}" timeout 120 gdb -q -batch \
    -ex run -ex 'bt 20' --args "${python}" -c "${check_program}" 2>&1 |
    grep -v '^\[New Thread\|^\[Thread\|^\[Inferior' | tail -n 40)
}

use_prebuilt=false
if [ -n "${prebuilt}" ]; then
  if [ "$(basename "${prebuilt}")" != "${name}" ]; then
    echo "build_mmcv: ${prebuilt} is for another mmcv, torch or GPU (this" \
      "one needs ${name}): building"
  elif gzip -dc "${prebuilt}" >"${src}/mmcv/_ext${suffix}" && check "${src}"; then
    use_prebuilt=true
    echo "build_mmcv: using the prebuilt ${prebuilt}"
  else
    backtrace "${src}"
    echo "build_mmcv: the prebuilt ${prebuilt} does not load: building"
    rm -f "${src}/mmcv/_ext${suffix}"
  fi
fi

if ! ${use_prebuilt}; then
  echo "build_mmcv: building with CUDA for ${TORCH_CUDA_ARCH_LIST}, MAX_JOBS=${MAX_JOBS:-all}"
  (cd "${src}" && MMCV_WITH_OPS=1 FORCE_CUDA=1 "${PYTHON}" setup.py build_ext --inplace) ||
    die "the mmcv build failed (see above)"
  if ! check "${src}"; then
    backtrace "${src}"
    die "mmcv was built but its CUDA ops do not load"
  fi
  so="${src}/mmcv/_ext${suffix}"
  # Debug sections make up most of the file; gzip halves the rest.
  stripped="${build_dir}/_ext.stripped"
  if command -v strip >/dev/null 2>&1 && strip --strip-unneeded -o "${stripped}" "${so}"; then
    gzip -c "${stripped}" >"${artifacts}/${name}"
  else
    echo "build_mmcv: no strip here: keeping the unstripped extension"
    gzip -c "${so}" >"${artifacts}/${name}"
  fi
  echo "build_mmcv: wrote ${name} ($(du -h "${artifacts}/${name}" | cut -f1)) for a rerun to skip the build"
fi

rm -rf "${dest}/mmcv"
cp -r "${src}/mmcv" "${dest}/mmcv" || die "cannot install mmcv into ${dest}"
check "${dest}" || die "mmcv does not load from ${dest}"
# What the later steps import: mmcv's ops beside mmengine and mmdet.
(cd / && PYTHONPATH="${dest}${PYTHONPATH:+:${PYTHONPATH}}" "${PYTHON}" -c "
import mmengine, mmdet, mmdet.models, mmcv.ops
print('mmengine', mmengine.__version__, 'mmdet', mmdet.__version__, 'import')") ||
  die "mmengine, mmdet or mmcv.ops does not import from ${dest}"
