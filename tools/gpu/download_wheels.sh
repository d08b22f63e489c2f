#!/usr/bin/env bash
# Download what the GPU machine lacks (tools/gpu/wheels.txt) into WHEEL_DIR
# (default .whl, git-ignored), for its Python (GPU_PYTHON_VERSION, default
# 3.12) on manylinux x86_64, then check that every requirement of those
# packages is carried or in its image. Nothing can be fetched there, so this
# runs where pip works, beforehand: make gpu-wheels.
set -uo pipefail

cd "$(dirname "$0")/../.." || exit 1
DIR=${WHEEL_DIR:-.whl}
PY=${PYTHON:-python3}
LIST=tools/gpu/wheels.txt
PY_VERSION=${GPU_PYTHON_VERSION:-3.12}

mkdir -p "${DIR}" || exit 1
# One version of each package: two of one name stop the install there. A
# prebuilt mmcv extension (*.so.gz) from an earlier GPU run stays.
find "${DIR}" -maxdepth 1 \( -name '*.whl' -o -name '*.tar.gz' \) -delete

binary=()
sdist=()
while read -r spec kind; do
  case "${spec}" in '' | '#'*) continue ;; esac
  if [ "${kind:-}" = sdist ]; then sdist+=("${spec}"); else binary+=("${spec}"); fi
done <"${LIST}"

# pip matches each manylinux tag exactly: name every one a wheel may carry.
platforms=()
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 \
  manylinux2014 manylinux1; do
  platforms+=(--platform "${tag}_x86_64")
done

echo "== ${#binary[@]} wheels for Python ${PY_VERSION} into ${DIR}/"
"${PY}" -m pip download -q --disable-pip-version-check --no-deps \
  --only-binary=:all: --python-version "${PY_VERSION}" --implementation cp \
  "${platforms[@]}" -d "${DIR}" "${binary[@]}" || {
  echo "gpu-wheels: pip could not download ${binary[*]}" >&2
  exit 1
}
echo "== source archives: ${sdist[*]}"
# The archive only; its metadata is read with the tools already here.
"${PY}" -m pip download -q --disable-pip-version-check --no-deps \
  --no-binary=:all: --no-build-isolation -d "${DIR}" "${sdist[@]}" || {
  echo "gpu-wheels: pip could not download ${sdist[*]}" >&2
  exit 1
}

"${PY}" tools/gpu/check_wheels.py --python-version "${PY_VERSION}" "${DIR}" || exit 1
du -ch "${DIR}"/* | tail -n 1 | sed "s|total|in ${DIR}/ (carried with the working tree, 64 MiB in all)|"
