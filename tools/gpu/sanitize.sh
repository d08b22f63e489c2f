#!/usr/bin/env bash
# Run a program under one compute-sanitizer tool and judge mmlaplacian's
# kernels only (their names hold "mmlaplacian").
#
#   tools/gpu/sanitize.sh memcheck|racecheck|initcheck|synccheck CMD...
#
# memcheck, racecheck and synccheck check our kernels alone (a kernel
# filter: torch's own would multiply the time). initcheck checks every
# kernel, since it learns which memory is written only from the kernels it
# checks, and only its errors in our kernels count.
#
# Exit status: 0 no error in our kernels; 1 errors found, or the program
# failed; 69 the sanitizer cannot run on this machine (it refuses the
# device, e.g. on a gVisor runtime: "Device not supported", then error 999
# at the first allocation); 127 compute-sanitizer not found. Only 0 is a
# pass. COMPUTE_SANITIZER names the binary (default: the one on PATH).
set -uo pipefail

ERROR_EXIT=86  # the sanitizer's own "errors found" status
tool=${1:?usage: sanitize.sh TOOL CMD...}
shift
[ $# -gt 0 ] || { echo "usage: sanitize.sh TOOL CMD..." >&2; exit 2; }
case "${tool}" in
  memcheck | racecheck | initcheck | synccheck) ;;
  *) echo "sanitize.sh: unknown tool '${tool}'" >&2; exit 2 ;;
esac

sanitizer=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer)}
if [ -z "${sanitizer}" ] || [ ! -x "${sanitizer}" ]; then
  echo "sanitize: compute-sanitizer not found (set COMPUTE_SANITIZER or put" \
    "the CUDA toolkit's bin/ on PATH): ${tool} NOT run, not a pass" >&2
  exit 127
fi

# The kernel filter is --filter in recent releases, --kernel-name before.
filter=()
if [ "${tool}" != initcheck ]; then
  options=$("${sanitizer}" --help 2>&1 | grep -oE '^ +--[a-z-]+' | tr -d ' ')
  if grep -qx -- '--filter' <<<"${options}"; then
    filter=(--filter kns=mmlaplacian)
  elif grep -qx -- '--kernel-name' <<<"${options}"; then
    filter=(--kernel-name kns=mmlaplacian)
  else
    echo "sanitize: no kernel filter in this compute-sanitizer: checking every kernel"
  fi
fi
# Without torch's caching allocator every tensor is its own allocation, so
# a write a few elements past one is out of bounds, and an unwritten read
# cannot hit memory an earlier tensor left behind.
export PYTORCH_NO_CUDA_MEMORY_CACHING=1

log=$(mktemp "${TMPDIR:-/tmp}/sanitize.XXXXXX")
trap 'rm -f "${log}"' EXIT
run() {  # run FILTER_ARGS...: the tool over the program, into the log
  local args=(--tool "${tool}" --error-exitcode "${ERROR_EXIT}" "$@")
  echo "\$ ${sanitizer} ${args[*]} ${cmd[*]}"
  "${sanitizer}" "${args[@]}" "${cmd[@]}" 2>&1 | tee "${log}"
  return "${PIPESTATUS[0]}"
}
cmd=("$@")
run "${filter[@]}"
rc=$?
if [ "${rc}" -ne 0 ] && [ ${#filter[@]} -gt 0 ] &&
  grep -Eiq 'unrecognized|unknown option|invalid (option|argument|value)' "${log}"; then
  echo "sanitize: the kernel filter was refused: checking every kernel"
  filter=()
  run
  rc=$?
fi

# What each tool prints for an error in a kernel, and for a refused device.
found='Invalid __(global|shared|local)__|Race reported|hazard detected|Uninitialized __global__|Barrier error'
refused='Device not supported|[Ee]rror:? 999|CUDA_ERROR_UNKNOWN|cudaErrorUnknown|CUDA error: unknown error'
if grep -Eq "${refused}" "${log}" && ! grep -Eq "${found}" "${log}"; then
  echo "sanitize: ${tool}: sanitizer unavailable on this machine ($(grep -Eo \
    "${refused}" "${log}" | head -n 1)): not run, not a pass"
  exit 69
fi
# Checking every kernel, only errors in ours count: the tool's report lines
# (each begins with "=") name the kernel.
if [ ${#filter[@]} -eq 0 ] && [ "${rc}" -eq "${ERROR_EXIT}" ] &&
  grep -Eq "${found}" "${log}" && ! grep -Eq '^=+ .*mmlaplacian' "${log}" &&
  ! grep -q 'Target application returned an error' "${log}"; then
  echo "sanitize: ${tool}: errors only in other libraries' kernels (above), none in mmlaplacian's"
  exit 0
fi
if [ "${rc}" -eq 0 ]; then
  echo "sanitize: ${tool}: no errors in mmlaplacian's kernels"
  exit 0
fi
if grep -Eq "${found}" "${log}"; then
  echo "sanitize: ${tool}: ERRORS found in a kernel (exit ${rc}; see above)"
else
  echo "sanitize: ${tool}: the program or the sanitizer failed (exit ${rc})"
fi
exit 1
