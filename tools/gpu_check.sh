#!/usr/bin/env bash
# GPU acceptance run of mmlaplacian on one CUDA GPU: the steps in the order
# of what their results are worth, under one deadline, with a report that is
# written after every step and on any exit.
#
#   wheels, probe  install carried wheels (GPU_CHECK_WHEELS); nvidia-smi,
#                  torch and the compute capability, nvcc, compute-sanitizer,
#                  headers (tools/gpu/probe.py)
#   mmcv           (MMCV_SDIST) mmcv built with CUDA, beside steps 1 and 2
#   1. build, cuda-kernels, ops-tests: our extension (FORCE_CUDA=1), then
#      tests/ops and tests/gpu/test_gpu_build.py (torch only)
#   2. sanitizer-selftest (planted bugs must fail), then memcheck,
#      racecheck, initcheck and synccheck over tests/gpu/sanitizer_cases.py
#   3. model-tests: the attention, LaplacianFormer-T and Tiny Mask R-CNN
#      on CUDA against the CPU
#   4. amp-tests: fp16 AMP training steps (mmcv's CUDA ops)
#   5. benchmark-ops, benchmark-backbone, benchmark-cases
#
# A step whose inputs failed is skipped; every other step runs. Output in
# ${OUT:-gpu_check_out}/, six files at most: gpu_report.md (also printed),
# logs.tar.gz, the backbone benchmark's benchmark.md, time.png and
# memory.png, and the mmcv extension built here (mmcv-*.so.gz: carried
# back, it spares a rerun the build).
#
# Exit status: 0 every step passed; 1 a step failed (or, in a dry run, did
# not resolve); 2 no GPU run is possible here (within seconds); 3 incomplete
# (nothing failed, but a check could not run here, e.g. the sanitizer
# refused the device).
#
#   bash tools/gpu_check.sh                  # or: make gpu-check
#   GPU_CHECK_DRY_RUN=1 bash tools/gpu_check.sh
#
# Environment: PYTHON (default python3); GPU_CHECK_BUDGET_S (seconds for
# the whole run, default 470) or GPU_CHECK_DEADLINE (the same as a time in
# epoch seconds); GPU_CHECK_GROUPS (a comma-separated subset of
# ops,sanitizers,models,amp,benchmarks); GPU_CHECK_DRY_RUN=1 (the probe
# and the report run, every step's command is only resolved: not a pass);
# TORCH_CUDA_ARCH_LIST (default: the GPU's). tools/gpu_session.sh sets
# GPU_CHECK_WHEELS, GPU_CHECK_MM_PATH, MMCV_SDIST and MMCV_PREBUILT.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
REPO=${PWD}
OUT_DIR=${OUT:-gpu_check_out}
mkdir -p "${OUT_DIR}" && OUT_DIR=$(cd "${OUT_DIR}" && pwd) || exit 2
PYTHON=${PYTHON:-$(command -v python3 || command -v python || echo python3)}
DRY_RUN=${GPU_CHECK_DRY_RUN:-0}
WANTED=${GPU_CHECK_GROUPS:-ops,sanitizers,models,amp,benchmarks}
MM_PATH=${GPU_CHECK_MM_PATH:-}
STARTED=$(date +%s)
DEADLINE=${GPU_CHECK_DEADLINE:-$((STARTED + ${GPU_CHECK_BUDGET_S:-470}))}
RESERVE=${GPU_CHECK_RESERVE_S:-15}  # for the report after the last step
KILL_AFTER=${GPU_CHECK_KILL_AFTER_S:-10}  # KILL a step this long after TERM
MIN_STEP_S=5
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX") || exit 2
LOGS=${WORK}/logs
STEPS=${WORK}/steps.tsv
mkdir -p "${LOGS}" "${WORK}/running" "${WORK}/artifacts"
: >"${STEPS}"
# The repository first; the OpenMMLab packages only for the steps that use
# them, so that a broken mmcv build cannot take the torch-only steps down.
TORCH_PATH=${REPO}${PYTHONPATH:+:${PYTHONPATH}}
MM_PYTHONPATH=${REPO}${MM_PATH:+:${MM_PATH}}${PYTHONPATH:+:${PYTHONPATH}}
PYTEST=("${PYTHON}" -m pytest -q -rfEs -p no:cacheprovider --durations=10)
export MMLAPLACIAN_GPU_FIGURES=${WORK}/figures.jsonl
NOT_RUN=
INTERRUPTED=

# A reused output folder keeps nothing of an earlier run (an earlier
# revision of this script also left logs/, env.txt, steps.tsv, ...).
rm -rf "${OUT_DIR}"/{gpu_report.md,logs.tar.gz,benchmark.md,time.png,memory.png} \
  "${OUT_DIR}"/mmcv-*.so.gz "${OUT_DIR}"/.gpu_report.* "${OUT_DIR}"/.logs.* \
  "${OUT_DIR}"/{logs,env.txt,steps.tsv,figures.jsonl,benchmark_backbone}

want() { [[ ",${WANTED}," == *",$1,"* ]]; }
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"${STEPS}"; }
skip() {  # skip NAME REASON
  record "$1" "skipped: $2" 0
  echo "== $1: skipped ($2)"
}
passed() {  # passed NAME: the step ran and passed (or resolved, dry run)
  awk -F'\t' -v n="$1" '$1 == n && ($2 == "passed" || $2 ~ /^dry run/) \
    { ok = 1 } END { exit !ok }' "${STEPS}"
}
result_of() { awk -F'\t' -v n="$1" '$1 == n { r = $2 } END { print r }' "${STEPS}"; }
why_not() {  # why_not NAME: how a step that did not pass ended
  case "$(result_of "$1")" in
    '') echo "did not run" ;;
    FAILED*) echo failed ;;
    skipped*) echo "was skipped" ;;
    *) echo "could not run here" ;;
  esac
}

# shellcheck disable=SC2329  # called from the EXIT trap
exit_status() {  # from the steps table: see the header
  if [ -n "${NOT_RUN}" ]; then echo 2; return; fi
  local failed incomplete
  failed=$(cut -f2 "${STEPS}" | grep -c '^FAILED')
  incomplete=$(cut -f2 "${STEPS}" | grep -c -e '^skipped' -e '^unavailable')
  if [ "${failed}" -gt 0 ] || [ -n "${INTERRUPTED}" ]; then echo 1
  elif [ "${DRY_RUN}" = 1 ]; then echo 0
  elif [ "${incomplete}" -gt 0 ]; then echo 3
  else echo 0; fi
}

write_report() {  # write_report STATUS: the report and the logs, as they stand
  local tmp="${OUT_DIR}/.gpu_report.md.${BASHPID}"
  if ! "${PYTHON}" "${REPO}/tools/gpu/render_report.py" --work "${WORK}" \
    --status "$1" --dry-run "${DRY_RUN}" --seconds "$(($(date +%s) - STARTED))" \
    --not-run "${NOT_RUN}" --interrupted "${INTERRUPTED}" \
    >"${tmp}" 2>>"${LOGS}/report.log"; then
    printf '# mmlaplacian GPU acceptance report\n\nThe report could not be rendered (logs/report.log). Steps:\n\n%s\n%s\n%s\n' \
      '~~~' "$(cat "${STEPS}")" '~~~' >"${tmp}"
  fi
  mv -f "${tmp}" "${OUT_DIR}/gpu_report.md"
  local parts=(logs) part
  for part in steps.tsv probe.txt probe.json figures.jsonl benchmark_backbone/results.json; do
    [ -e "${WORK}/${part}" ] && parts+=("${part}")
  done
  tar -czf "${OUT_DIR}/.logs.tar.gz.${BASHPID}" -C "${WORK}" \
    --warning=no-file-changed "${parts[@]}" 2>/dev/null
  mv -f "${OUT_DIR}/.logs.tar.gz.${BASHPID}" "${OUT_DIR}/logs.tar.gz" 2>/dev/null
}

resolve() {  # resolve CMD...: what a dry run checks instead of running CMD
  local cmd=("$@") arg problems=()
  if [ "${cmd[0]}" = env ]; then  # env VAR=value ... CMD
    cmd=("${cmd[@]:1}")
    while [[ "${cmd[0]:-}" == *=* ]]; do cmd=("${cmd[@]:1}"); done
  fi
  # timeout runs programs only: a shell function here would exit 127.
  type -P "${cmd[0]:-}" >/dev/null ||
    problems+=("'${cmd[0]:-}' is not a program on PATH")
  local module=
  for arg in "${cmd[@]:1}"; do
    if [ "${module}" = next ]; then  # python -m MODULE: importable here?
      "${cmd[0]}" -c 'import importlib.util as u, sys
sys.exit(u.find_spec(sys.argv[1]) is None)' "${arg}" 2>/dev/null ||
        problems+=("no module ${arg}")
      module=checked
      continue
    fi
    case "${arg}" in
      -m) [ -z "${module}" ] && module=next ;;
      -*) ;;
      *.py | *.sh | tests/* | tools/*)  # a path, or a pytest node id
        [ -e "${arg%%::*}" ] || problems+=("${arg%%::*} not found") ;;
    esac
  done
  [ ${#problems[@]} -eq 0 ] || { echo "${problems[*]}"; return 1; }
}

run_step() {  # run_step NAME LIMIT_S CMD...: CMD under its limit and the deadline
  local name=$1 limit=$2
  shift 2
  local log="${LOGS}/${name}.log" now left cut=false
  now=$(date +%s)
  left=$((DEADLINE - RESERVE - now))
  if [ "${left}" -lt "${MIN_STEP_S}" ]; then
    skip "${name}" "no time left before the global deadline"
    return 1
  fi
  if [ "${left}" -lt "${limit}" ]; then limit=${left} cut=true; fi
  printf '$ %s\n' "$*" >"${log}"
  echo "== ${name} (at most ${limit} s): $*"
  echo "${now}" >"${WORK}/running/${name}"
  timeout -k "${KILL_AFTER}" "${limit}" "$@" >>"${log}" 2>&1 </dev/null &
  local pid=$!
  echo "${pid}" >>"${WORK}/pids"
  wait "${pid}"
  local rc=$? took result
  took=$(($(date +%s) - now))
  case "${rc}" in
    0) result=passed ;;
    124 | 137)
      if ${cut}; then result="FAILED (stopped at the global deadline after ${took} s)"
      else result="FAILED (over its ${limit} s limit)"; fi ;;
    69) result="unavailable on this machine (not a pass)" ;;
    127) result="FAILED (exit 127: a program it needs was not found)" ;;
    *) result="FAILED (exit ${rc})" ;;
  esac
  if [ "${rc}" -eq 0 ] && grep -q 'sanitizer unavailable on this machine' "${log}"; then
    result="unavailable on this machine (not a pass)"
  elif [ "${rc}" -eq 0 ] && tail -n 3 "${log}" | grep -Eq '^(=+ )?[0-9]+ skipped'; then
    result="FAILED (every test was skipped)"  # e.g. torch lost the GPU
    rc=1
  fi
  record "${name}" "${result}" "${took}"
  rm -f "${WORK}/running/${name}"
  echo "   ${name}: ${result} after ${took} s"
  write_report running
  [ "${rc}" -eq 0 ]
}

step() {  # step NAME LIMIT_S CMD...: run_step, or only resolve in a dry run
  if [ "${DRY_RUN}" != 1 ]; then run_step "$@"; return; fi
  local name=$1 limit=$2 problem
  shift 2
  if [ $((DEADLINE - RESERVE - $(date +%s))) -lt "${MIN_STEP_S}" ]; then
    skip "${name}" "no time left before the global deadline"
    return 1
  fi
  printf '$ %s\n' "$*" >"${LOGS}/${name}.log"
  if problem=$(resolve "$@"); then
    record "${name}" "dry run: resolved, not run (at most ${limit} s)" 0
  else
    record "${name}" "FAILED (dry run: ${problem})" 0
    return 1
  fi
}

after() {  # after "DEP..." NAME LIMIT_S CMD...: step, if every DEP passed
  local deps=$1 dep
  shift
  for dep in ${deps}; do
    if ! passed "${dep}"; then
      skip "$1" "needs ${dep}, which $(why_not "${dep}")"
      return 1
    fi
  done
  step "$@"
}

# shellcheck disable=SC2329  # called from the EXIT trap
stop_steps() {  # end every step still running: its timeout's process group
  [ -f "${WORK}/pids" ] || return 0
  local pid signal
  for signal in TERM KILL; do
    while read -r pid; do
      kill "-${signal}" -- "-${pid}" 2>/dev/null || kill "-${signal}" "${pid}" 2>/dev/null
    done <"${WORK}/pids"
    [ "${signal}" = TERM ] && sleep 1
  done
}

# shellcheck disable=SC2329  # called from the EXIT trap
finish() {  # on any exit: stop the steps, write and print the report
  trap - EXIT
  trap '' TERM INT  # a second signal must not cut the report short
  stop_steps
  wait 2>/dev/null
  local marker status
  for marker in "${WORK}"/running/*; do
    [ -e "${marker}" ] || continue
    record "${marker##*/}" "FAILED (stopped: ${INTERRUPTED:-the run ended} after $(($(date +%s) - $(cat "${marker}"))) s)" 0
  done
  status=$(exit_status)
  write_report "${status}"
  local f
  for f in "${WORK}"/benchmark_backbone/{benchmark.md,time.png,memory.png} "${WORK}"/artifacts/*.so.gz; do
    [ -f "${f}" ] && cp "${f}" "${OUT_DIR}/"
  done
  cat "${OUT_DIR}/gpu_report.md"
  echo "gpu_check: $(sed -n 's/^Result: \*\*\([^*]*\)\*\*.*/\1/p' "${OUT_DIR}/gpu_report.md" | head -n 1) (exit ${status}) after $(($(date +%s) - STARTED)) s; report in ${OUT_DIR}/gpu_report.md"
  rm -rf "${WORK}"
  exit "${status}"
}
trap finish EXIT
trap 'INTERRUPTED=SIGTERM; exit 143' TERM
trap 'INTERRUPTED=SIGINT; exit 130' INT

# ------------------------------------------------------------ wheels, probe
if { [ -n "${GPU_CHECK_WHEELS:-}" ] || [ -n "${MMCV_SDIST:-}" ]; } && [ -z "${MM_PATH}" ]; then
  echo "gpu_check: GPU_CHECK_WHEELS and MMCV_SDIST need GPU_CHECK_MM_PATH" \
    "(the folder to install into)" >&2
  exit 2
fi
for group in ops sanitizers models amp benchmarks; do
  want "${group}" && continue
  case "${group}" in
    ops) names=(ops-tests) ;;
    sanitizers) names=(sanitizer-selftest memcheck racecheck initcheck synccheck) ;;
    models) names=(model-tests) ;;
    amp) names=(amp-tests) ;;
    benchmarks) names=(benchmark-ops benchmark-backbone benchmark-cases) ;;
  esac
  for name in "${names[@]}"; do skip "${name}" "not in GPU_CHECK_GROUPS"; done
done
wheels_dep=
if [ -n "${GPU_CHECK_WHEELS:-}" ]; then
  wheels_dep=wheels
  wheels=("${GPU_CHECK_WHEELS}"/*.whl)
  if [ -e "${wheels[0]}" ]; then
    step wheels 120 "${PYTHON}" -m pip install -q --no-index --no-deps --no-compile \
      --no-cache-dir --disable-pip-version-check --upgrade --target "${MM_PATH}" \
      "${wheels[@]}"
  else
    record wheels "FAILED (no wheels in ${GPU_CHECK_WHEELS}: run make gpu-wheels where pip works, and carry that folder)" 0
  fi
fi
run_step probe 60 env PYTHONPATH="${MM_PYTHONPATH}" "${PYTHON}" tools/gpu/probe.py \
  --text "${WORK}/probe.txt" --json "${WORK}/probe.json" --env "${WORK}/probe.env"
declare -A PROBE=()
if [ -f "${WORK}/probe.env" ]; then
  while IFS='=' read -r key value; do
    [ -n "${key}" ] && PROBE[${key}]=${value}
  done <"${WORK}/probe.env"
fi
if [ -n "${PROBE[REASON]:-}" ] || [ ! -f "${WORK}/probe.env" ]; then
  reason=${PROBE[REASON]:-the probe did not finish (see logs/probe.log)}
  if [ "${DRY_RUN}" = 1 ]; then
    echo "gpu_check: dry run, although no GPU run is possible here: ${reason}"
  else
    NOT_RUN=${reason}
    echo "gpu_check: no GPU run is possible here: ${reason}" >&2
    exit 2
  fi
fi
[ -z "${CUDA_HOME:-}" ] && [ -n "${PROBE[CUDA_HOME]:-}" ] && export CUDA_HOME=${PROBE[CUDA_HOME]}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-${PROBE[CAPABILITY]:-9.0}}
[ -z "${COMPUTE_SANITIZER:-}" ] && [ -n "${PROBE[SANITIZER]:-}" ] && export COMPUTE_SANITIZER=${PROBE[SANITIZER]}

# ------------------------------------- mmcv in the background, steps 1 and 2
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc obeys both
own_jobs=${cores}
mmcv_pid=
if [ -n "${MMCV_SDIST:-}" ] && { want models || want amp || want benchmarks; }; then
  own_jobs=$((cores > 8 ? 4 : (cores + 1) / 2))  # the rest build mmcv
  after "${wheels_dep}" mmcv 330 env MAX_JOBS=$((cores - own_jobs > 0 ? cores - own_jobs : 1)) \
    PYTHON="${PYTHON}" PYTHONPATH="${MM_PYTHONPATH}" bash tools/gpu/build_mmcv.sh "${MMCV_SDIST}" \
    "${WORK}/mmcv-build" "${MM_PATH}" \
    "${WORK}/artifacts" "${MMCV_PREBUILT:-}" &
  mmcv_pid=$!
fi
selftest_pid=
if want sanitizers; then  # needs nvcc only, not our build
  step sanitizer-selftest 150 env PYTHONPATH="${TORCH_PATH}" "${PYTEST[@]}" \
    tests/gpu/test_broken_kernels.py &
  selftest_pid=$!
fi

step build 240 env FORCE_CUDA=1 MAX_JOBS="${own_jobs}" PYTHONPATH="${MM_PYTHONPATH}" \
  "${PYTHON}" setup.py build_ext --inplace
# Later steps need the CUDA kernels for this GPU, not only a build.
after build cuda-kernels 60 env PYTHONPATH="${TORCH_PATH}" "${PYTEST[@]}" \
  tests/gpu/test_gpu_build.py::test_extension_has_cuda_kernels

pids=()
if want ops; then
  after cuda-kernels ops-tests 240 env PYTHONPATH="${TORCH_PATH}" OMP_NUM_THREADS=4 \
    "${PYTEST[@]}" tests/ops tests/gpu/test_gpu_build.py \
    --ignore=tests/ops/test_cuda_compile.py &
  pids+=($!)
fi
if want sanitizers; then
  [ -n "${selftest_pid}" ] && wait "${selftest_pid}"
  for tool in memcheck racecheck initcheck synccheck; do
    if [[ "$(result_of sanitizer-selftest)" == unavailable* ]]; then
      skip "${tool}" "sanitizer unavailable on this machine (sanitizer-selftest)"
      continue
    fi
    after cuda-kernels "${tool}" 240 env PYTHONPATH="${TORCH_PATH}" \
      bash tools/gpu/sanitize.sh "${tool}" "${PYTHON}" tests/gpu/sanitizer_cases.py &
    pids+=($!)
  done
fi

# ------------------------------------------------------------- steps 3 to 5
# The model tests need mmcv, not the sanitizers: they start as soon as mmcv
# is built, beside any sanitizer still running.
mm_dep=
if [ -n "${mmcv_pid}" ]; then
  wait "${mmcv_pid}"
  mm_dep=mmcv
fi
want models && after "${mm_dep}" model-tests 240 env PYTHONPATH="${MM_PYTHONPATH}" \
  "${PYTEST[@]}" tests/gpu/test_gpu_models.py
want amp && after "${mm_dep}" amp-tests 180 env PYTHONPATH="${MM_PYTHONPATH}" \
  "${PYTEST[@]}" tests/gpu/test_gpu_amp.py
# The benchmarks time an otherwise idle GPU.
[ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"
if want benchmarks; then
  after cuda-kernels benchmark-ops 90 env PYTHONPATH="${TORCH_PATH}" "${PYTHON}" \
    -m benchmarks.ops --device cuda --repeat 10 --markdown
  after "cuda-kernels ${mm_dep}" benchmark-backbone 150 env PYTHONPATH="${MM_PYTHONPATH}" \
    "${PYTHON}" -m benchmarks.backbone --device cuda \
    --models lf_tiny swin_t --sizes 800x1344 1600x2688 --modes fwd,fwdbwd \
    --repeat 3 --warmup 1 --case-budget 5 --timeout 60 \
    --out-dir "${WORK}/benchmark_backbone" --markdown
  # The tool tables a case that erred or ran out of time or memory, and
  # still exits 0: every case must have run.
  after benchmark-backbone benchmark-cases 30 "${PYTHON}" tools/gpu/check_benchmark.py \
    "${WORK}/benchmark_backbone/results.json"
fi
exit 0  # finish (the EXIT trap) works out the status
