#!/usr/bin/env bash
# Configures and builds Conveyor into BUILD_DIR (default ./build), Release,
# with ccache when present. Incremental: re-running rebuilds only what changed.
# Extra arguments are passed to cmake's configure step. BUILD_TARGETS (space-
# separated target names) builds only those; default: everything.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
JOBS="${JOBS:-$(nproc)}"
# ccache keys on paths relative to the source tree, so clones and worktrees
# in other folders share cached objects.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"
GEN=()
if command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
elif [ $# -gt 0 ]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" "$@"
fi
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
