#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every unit and
# integration test through CTest, then the engine tests again under
# ThreadSanitizer. Exits non-zero on any failure.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/install-deps.sh"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
export BUILD_DIR
"$ROOT/scripts/build.sh"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)"

# The engine under ThreadSanitizer: core and its unit tests only.
TSAN_DIR="${TSAN_DIR:-$ROOT/build-tsan}"
BUILD_DIR="$TSAN_DIR" "$ROOT/scripts/build.sh" -DCONVEYOR_TSAN=ON -DCONVEYOR_BUILD_SERVER=OFF \
  -DCONVEYOR_BUILD_BENCH=OFF
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  "$TSAN_DIR/tests/conveyor_unit_tests" "[engine]"
