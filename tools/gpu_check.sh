#!/usr/bin/env bash
# GPU acceptance run of mmlaplacian: the whole stack on one CUDA GPU, in
# under 8 minutes, with one markdown report of every figure.
#
#   1. CUDA build of mmlaplacian._ext (FORCE_CUDA=1); a build without CUDA
#      kernels is a failure.
#   2. pytest tests/ops tests/gpu: op tests on every impl (the CUDA kernels
#      included), fp16/bf16 gradient values against fp32, the attention,
#      LaplacianFormer-T and Tiny Mask R-CNN forward+backward on CUDA against
#      the CPU, and fp16 AMP training steps with AmpOptimWrapper.
#      At the same time: compute-sanitizer memcheck and racecheck on small
#      cases of both ops (skipped, with a note, without compute-sanitizer).
#   3. The op benchmark and the backbone benchmark (LaplacianFormer-T vs
#      Swin-T, fwd and fwd+bwd, 800x1344 and 1600x2688) on the GPU.
#
# Run from the repository root. Output: ${OUT:-gpu_check_out}/gpu_report.md,
# with the logs of each step in logs/. Exit status 0 only if every step
# passed; 2 (within seconds) on a machine without a usable GPU.
#
#   bash tools/gpu_check.sh                          # or: make gpu-check
#   TORCH_CUDA_ARCH_LIST=8.0 bash tools/gpu_check.sh # e.g. on an A100
set -uo pipefail

OUT_DIR=${OUT:-gpu_check_out}
LOG_DIR=${OUT_DIR}/logs
REPORT=${OUT_DIR}/gpu_report.md
FIGURES=${OUT_DIR}/figures.jsonl
PYTHON=${PYTHON:-python}
mkdir -p "${LOG_DIR}"
rm -f "${FIGURES}" "${OUT_DIR}"/steps.tsv
export PYTHONPATH="${PWD}${PYTHONPATH:+:${PYTHONPATH}}"
export MMLAPLACIAN_GPU_FIGURES=${FIGURES}

fail_early() {  # fail_early MESSAGE: no GPU run is possible here
  printf '# mmlaplacian GPU acceptance report\n\nNot run: %s\n' "$1" \
    >"${REPORT}"
  echo "gpu_check: FAILED before any step: $1" >&2
  exit 2
}

# ------------------------------------------------------------ preconditions
if ! command -v nvidia-smi >/dev/null 2>&1; then
  fail_early "no NVIDIA driver on this machine (nvidia-smi not found). \
This acceptance run needs a CUDA GPU; on a CPU machine run 'make test'."
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  fail_early "nvidia-smi finds no usable GPU: $(nvidia-smi -L 2>&1 | head -n 1)"
fi
if ! torch_info=$("${PYTHON}" -c "import torch; \
print(torch.__version__, torch.version.cuda, torch.cuda.is_available())" \
    2>&1); then
  fail_early "cannot import torch with ${PYTHON}: ${torch_info}"
fi
read -r torch_version torch_cuda cuda_ok <<<"${torch_info}"
if [ "${cuda_ok}" != True ]; then
  fail_early "torch ${torch_version} (CUDA ${torch_cuda}) cannot use the \
GPU (torch.cuda.is_available() is False): install a CUDA build of torch \
that matches the driver."
fi
# torch derives CUDA_HOME from the nvcc on PATH; a wrapper script outside the
# toolkit (e.g. /usr/local/bin/nvcc) would point it where libcudart is not.
if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDA_HOME=/usr/local/cuda
fi
NVCC=${CUDA_HOME:+${CUDA_HOME}/bin/}nvcc
if ! command -v "${NVCC}" >/dev/null 2>&1; then
  fail_early "no CUDA toolkit (nvcc) to build the kernels: set CUDA_HOME."
fi
# Build for this GPU only (the default list of setup.py takes much longer).
if [ -z "${TORCH_CUDA_ARCH_LIST:-}" ]; then
  TORCH_CUDA_ARCH_LIST=$("${PYTHON}" -c "import torch; \
print('%d.%d' % torch.cuda.get_device_capability())")
fi
export TORCH_CUDA_ARCH_LIST
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
SECONDS=0

# ---------------------------------------------------------------- the steps
status=0
step() {  # step NAME LIMIT_S CMD...: log to logs/NAME.log, keep going
  local name=$1 limit=$2
  shift 2
  echo "== ${name}: $*"
  local start=${SECONDS}
  timeout "${limit}" "$@" >"${LOG_DIR}/${name}.log" 2>&1
  local rc=$?
  local took=$((SECONDS - start)) result=passed
  [ "${rc}" -eq 0 ] || result="FAILED (exit ${rc})"
  [ "${rc}" -eq 124 ] && result="FAILED (over its ${limit} s limit)"
  [ "${rc}" -eq 0 ] || status=1
  printf '%s\t%s\t%s\n' "${name}" "${result}" "${took}" \
    >>"${OUT_DIR}/steps.tsv"
  echo "   ${result} after ${took} s"
  return "${rc}"
}
skip_step() {  # skip_step NAME REASON
  printf '%s\tskipped: %s\t0\n' "$1" "$2" >>"${OUT_DIR}/steps.tsv"
  echo "== $1: skipped ($2)"
}

sanitizer() {  # sanitizer TOOL: compute-sanitizer on the op cases
  local args=(--tool "$1")
  local help
  help=$(compute-sanitizer --help 2>&1)
  # Check only our kernels: torch's own would multiply the time.
  grep -q -- '--kernel-name' <<<"${help}" &&
    args+=(--kernel-name kns=mmlaplacian)
  grep -q -- '--error-exitcode' <<<"${help}" && args+=(--error-exitcode 1)
  compute-sanitizer "${args[@]}" "${PYTHON}" tests/gpu/sanitizer_cases.py
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  echo "torch ${torch_version}, CUDA ${torch_cuda}"
  "${NVCC}" --version | tail -n 2
  echo "TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST}, MAX_JOBS=${MAX_JOBS}"
  echo "revision $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(
    git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
} >"${OUT_DIR}/env.txt" 2>&1
cat "${OUT_DIR}/env.txt"

built=false
if step build 240 env FORCE_CUDA=1 "${PYTHON}" setup.py build_ext --inplace; then
  if step cuda-kernels 60 "${PYTHON}" -c "
from mmlaplacian.ops import ext_info
info = ext_info()
print(info)
assert 'cuda' in info['devices'], ('mmlaplacian._ext has no CUDA kernels '
    'although a GPU is present: the CUDA build failed or was skipped (see '
    'logs/build.log)')"; then
    built=true
  fi
fi

if ${built}; then
  # Correctness: tests and sanitizers side by side (timings come later).
  step pytest 240 "${PYTHON}" -m pytest tests/ops tests/gpu -q -rfEs \
    -p no:cacheprovider --ignore=tests/ops/test_cuda_compile.py \
    --durations=15 &
  pytest_pid=$!
  if command -v compute-sanitizer >/dev/null 2>&1; then
    step memcheck 240 sanitizer memcheck &
    memcheck_pid=$!
    step racecheck 240 sanitizer racecheck
    wait "${memcheck_pid}" || status=1
  else
    skip_step memcheck 'compute-sanitizer is not on PATH'
    skip_step racecheck 'compute-sanitizer is not on PATH'
  fi
  wait "${pytest_pid}" || status=1

  step benchmark-ops 90 "${PYTHON}" tools/analysis_tools/benchmark_ops.py \
    --device cuda --repeat 10 --markdown
  # benchmark_backbone.py names its device option --devices (older) or
  # --device; use whichever this revision has.
  bb_help=$("${PYTHON}" tools/analysis_tools/benchmark_backbone.py --help 2>&1)
  if grep -q -- '--device ' <<<"${bb_help}"; then
    device_opt=(--device cuda)
  elif grep -q -- '--devices' <<<"${bb_help}"; then
    device_opt=(--devices cuda)
  else
    device_opt=()
  fi
  if [ ${#device_opt[@]} -eq 0 ]; then
    skip_step benchmark-backbone 'benchmark_backbone.py has no device option'
    status=1
  else
    step benchmark-backbone 200 "${PYTHON}" \
      tools/analysis_tools/benchmark_backbone.py "${device_opt[@]}" \
      --models lf_tiny swin_t --sizes 800x1344 1600x2688 \
      --modes fwd,fwdbwd --repeat 3 --warmup 1 --case-budget 5 \
      --timeout 60 --out-dir "${OUT_DIR}/benchmark_backbone" --markdown
    # The tool reports a case that errs, runs out of time or memory in its
    # table and still exits 0: every case must have run.
    step benchmark-backbone-cases 30 "${PYTHON}" -c "
import json, sys
results = json.load(open(sys.argv[1]))
bad = [r for r in results if r['status'] != 'ok']
for r in bad:
    print(r['model'], r['size'], r['mode'], r['status'], r.get('message', ''))
print(f'{len(results) - len(bad)} of {len(results)} cases ran')
sys.exit(1 if bad or not results else 0)" \
      "${OUT_DIR}/benchmark_backbone/results.json"
  fi
else
  for name in pytest memcheck racecheck benchmark-ops benchmark-backbone; do
    skip_step "${name}" 'no CUDA build'
  done
  status=1
fi

# --------------------------------------------------------------- the report
"${PYTHON}" tests/gpu/render_report.py --out-dir "${OUT_DIR}" \
  --status "${status}" --seconds "${SECONDS}" >"${REPORT}" ||
  echo "gpu_check: could not write ${REPORT}" >&2
echo "gpu_check: $([ ${status} -eq 0 ] && echo OK || echo FAILED) after \
${SECONDS} s; report ${REPORT}"
exit ${status}
