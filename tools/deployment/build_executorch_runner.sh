#!/usr/bin/env bash
# Build mmlaplacian_executorch_runner (tools/deployment/executorch_runner/):
# ExecuTorch's C++ runtime with our kernels, no Python.
#
#   bash tools/deployment/build_executorch_runner.sh           # this machine
#   bash tools/deployment/build_executorch_runner.sh aarch64   # 64-bit Arm Linux
#
# For this machine it builds against the installed executorch package, into
# build/executorch_runner/. For aarch64 it cross-compiles (Debian's
# g++-aarch64-linux-gnu) against the runtime in executorch's aarch64 wheel
# of the installed release, into build/executorch_runner_aarch64/; run it on
# an Arm device, or here under qemu-user:
#   qemu-aarch64 -L /usr/aarch64-linux-gnu \
#       build/executorch_runner_aarch64/mmlaplacian_executorch_runner X.pte
set -euo pipefail

TARGET=${1:-native}
PYTHON=${PYTHON:-python3}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SOURCE=$ROOT/tools/deployment/executorch_runner

if ! command -v cmake > /dev/null; then
    echo "build_executorch_runner: cmake is not installed" >&2
    exit 1
fi
VERSION=$($PYTHON -c 'from importlib.metadata import version; print(version("executorch"))' 2> /dev/null) || {
    echo "build_executorch_runner: executorch is not installed (pip install executorch)" >&2
    exit 1
}

case $TARGET in
native)
    EXECUTORCH_ROOT=$($PYTHON -c 'import importlib.util as u; print(u.find_spec("executorch").submodule_search_locations[0])')
    BUILD=$ROOT/build/executorch_runner
    TOOLCHAIN=()
    ;;
aarch64)
    if ! command -v aarch64-linux-gnu-g++ > /dev/null; then
        echo "build_executorch_runner: no aarch64-linux-gnu-g++ (apt-get install g++-aarch64-linux-gnu)" >&2
        exit 1
    fi
    # The runtime's libraries and headers from executorch's aarch64 wheel of
    # the installed release (any Python's wheel: the runtime is the same).
    WHEELS=$ROOT/build/executorch_aarch64
    PY_VERSION=$($PYTHON -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
    if [ ! -d "$WHEELS/executorch/lib" ]; then
        mkdir -p "$WHEELS"
        $PYTHON -m pip download --quiet "executorch==$VERSION" --no-deps --only-binary=:all: \
            --platform manylinux_2_28_aarch64 --python-version "$PY_VERSION" -d "$WHEELS"
        (cd "$WHEELS" && $PYTHON -m zipfile -e executorch-"$VERSION"-*aarch64.whl unpacked &&
            mkdir -p executorch && mv unpacked/executorch/lib unpacked/executorch/include executorch/ &&
            rm -rf unpacked)
    fi
    EXECUTORCH_ROOT=$WHEELS/executorch
    BUILD=$ROOT/build/executorch_runner_aarch64
    TOOLCHAIN=(-DCMAKE_TOOLCHAIN_FILE="$SOURCE/aarch64-linux-gnu.cmake")
    ;;
*)
    echo "build_executorch_runner: unknown target '$TARGET' (native or aarch64)" >&2
    exit 2
    ;;
esac

echo "build_executorch_runner: $TARGET, executorch $VERSION at $EXECUTORCH_ROOT"
mkdir -p "$BUILD"
cmake -S "$SOURCE" -B "$BUILD" -DEXECUTORCH_ROOT="$EXECUTORCH_ROOT" "${TOOLCHAIN[@]}" > "$BUILD/configure.log" 2>&1 ||
    { cat "$BUILD/configure.log" >&2; exit 1; }
cmake --build "$BUILD" -j "$(nproc)"
echo "build_executorch_runner: $BUILD/mmlaplacian_executorch_runner"
