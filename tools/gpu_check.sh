#!/usr/bin/env bash
# Build the fused ops with CUDA on a GPU machine, run their tests and the
# CUDA benchmark. Run from the repository root; outputs go to
# ${OUT:-gpu_check_out}/. Each step has a time limit; together they stay
# under 8 minutes (about 4 on one H200 with 16 cores).
#
#   bash tools/gpu_check.sh
#   TORCH_CUDA_ARCH_LIST=8.0 bash tools/gpu_check.sh   # e.g. on an A100
set -uo pipefail

OUT_DIR=${OUT:-gpu_check_out}
mkdir -p "${OUT_DIR}"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
# torch derives CUDA_HOME from the nvcc on PATH; a wrapper script outside the
# toolkit (e.g. /usr/local/bin/nvcc) would point it where libcudart is not.
if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDA_HOME=/usr/local/cuda
fi
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
export PYTHONPATH="${PWD}${PYTHONPATH:+:${PYTHONPATH}}"
status=0

run() {  # run NAME TIMEOUT CMD...: log to ${OUT_DIR}/NAME.log, keep going
  local name=$1 limit=$2
  shift 2
  echo "== ${name}: $*"
  local start=${SECONDS}
  timeout "${limit}" "$@" >"${OUT_DIR}/${name}.log" 2>&1
  local rc=$?
  echo "   exit ${rc} after $((SECONDS - start)) s" | tee -a "${OUT_DIR}/${name}.log"
  tail -n 5 "${OUT_DIR}/${name}.log"
  [ "${rc}" -eq 0 ] || status=1
  return "${rc}"
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
  nvcc --version | tail -n 2
} >"${OUT_DIR}/env.txt" 2>&1
cat "${OUT_DIR}/env.txt"

if run build 240 env FORCE_CUDA=1 python setup.py build_ext --inplace; then
  python -c "from mmlaplacian.ops import ext_info; print(ext_info())" \
    | tee "${OUT_DIR}/ext_info.txt"
  run pytest 150 python -m pytest tests/ops -q -p no:cacheprovider -rs
  run benchmark 90 python tools/analysis_tools/benchmark_ops.py \
    --device cuda --repeat 10 --markdown
fi
echo "gpu_check: $([ ${status} -eq 0 ] && echo OK || echo FAILED); logs in ${OUT_DIR}/"
exit ${status}
