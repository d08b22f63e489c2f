#!/usr/bin/env bash
# The whole GPU acceptance on a bare machine that has Python, a CUDA torch,
# nvcc and compute-sanitizer but no OpenMMLab packages and no network (such
# as the H200 machine docs/gpu.md describes): installs the carried packages
# from .whl/ (made here with `make gpu-wheels`), builds mmcv with CUDA and
# our extension, and runs every step of tools/gpu_check.sh, in about 8
# minutes on 16 cores, all under one deadline.
#
#   bash tools/gpu_session.sh
#
# Environment: WHEEL_DIR (default .whl), GPU_SESSION_SITE (where the
# packages go, default /tmp/mmlaplacian_site), GPU_SESSION_BUDGET_S (the
# deadline, default 470 s: below the 600 s a command may run there, with
# time left for a rerun inside 15 minutes); the rest as in gpu_check.sh.
# A file mmcv-*.so.gz in WHEEL_DIR, as an earlier run wrote to $OUT, spares
# the mmcv build when it matches this torch and GPU.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
wheels=${WHEEL_DIR:-.whl}
export GPU_CHECK_DEADLINE=$(($(date +%s) + ${GPU_SESSION_BUDGET_S:-470}))
export GPU_CHECK_WHEELS=${wheels}
export GPU_CHECK_MM_PATH=${GPU_SESSION_SITE:-/tmp/mmlaplacian_site}
# One version of each file: `make gpu-wheels` keeps a single mmcv archive.
sdists=("${wheels}"/mmcv-*.tar.gz)
export MMCV_SDIST=${sdists[0]}
prebuilt=("${wheels}"/mmcv-*-ext-*.so.gz)
if [ -e "${prebuilt[0]}" ]; then export MMCV_PREBUILT=${prebuilt[0]}; fi
if [ ! -e "${MMCV_SDIST}" ]; then
  echo "gpu_session: no mmcv source archive in ${wheels}/: run make gpu-wheels" \
    "where pip works and carry ${wheels}" >&2
fi
exec bash tools/gpu_check.sh
