#!/usr/bin/env bash
# Builds the fuzz targets of tests/fuzz with clang, libFuzzer, ASan and
# UBSan (CONVEYOR_FUZZ) into FUZZ_DIR (default ./build-fuzz; ccache,
# incremental), then runs each target in turn for a bounded time.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET [TARGET...]]
#
# SECONDS_PER_TARGET defaults to 60; TARGETs default to all of jpeg_fuzz,
# config_fuzz, request_fuzz, handshake_fuzz. Each run starts from the
# target's committed seeds and regressions (tests/fuzz/<target>/) plus the
# corpus earlier runs grew in FUZZ_DIR/corpus/<target> (not committed).
# A crasher (crash-*, leak-*, timeout-*, oom-*) is written straight into
# tests/fuzz/<target>/regressions/, where CTest replays it in every build
# (fuzz.<target>) from then on: commit it with the fix. One job at a time
# (FUZZ_JOBS workers for libFuzzer's -fork mode if set). Prints each
# target's executions, speed, corpus and coverage; exits 1 if any target
# found something.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FUZZ_DIR="${FUZZ_DIR:-$ROOT/build-fuzz}"
SECONDS_PER_TARGET="${1:-60}"
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  TARGETS=(jpeg_fuzz config_fuzz request_fuzz handshake_fuzz)
fi

# Only the targets are built: the rest of the tree (the C client and its
# examples among it) is not made to link with libFuzzer's sanitizers.
if [ ! -f "$FUZZ_DIR/CMakeCache.txt" ]; then
  GEN=()
  if command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi
  CC=clang CXX=clang++ cmake -S "$ROOT" -B "$FUZZ_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Debug \
    -DCONVEYOR_FUZZ=ON -DCONVEYOR_BUILD_TESTS=OFF -DCONVEYOR_BUILD_BENCH=OFF
fi
CCACHE_BASEDIR="$ROOT" cmake --build "$FUZZ_DIR" -j "${JOBS:-$(nproc)}" --target "${TARGETS[@]}"

found=0
summary=()
for target in "${TARGETS[@]}"; do
  bin="$FUZZ_DIR/tests/fuzz/$target"
  src="$ROOT/tests/fuzz/$target"
  if [ ! -x "$bin" ]; then
    echo "fuzz.sh: no target '$target' (built: $(ls "$FUZZ_DIR/tests/fuzz" | grep _fuzz | tr '\n' ' '))" >&2
    exit 2
  fi
  corpus="$FUZZ_DIR/corpus/$target"
  mkdir -p "$corpus" "$src/regressions"
  log="$FUZZ_DIR/$target.log"
  echo "=== fuzz.sh: $target for ${SECONDS_PER_TARGET} s (log: $log) ==="
  before="$(ls "$src/regressions" | wc -l)"
  fork=()
  if [ -n "${FUZZ_JOBS:-}" ]; then fork=(-fork="$FUZZ_JOBS" -ignore_crashes=1); fi
  rc=0
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: a run past
  # 2 GiB is a memory bug (the targets cap image sizes well below that).
  "$bin" "${fork[@]}" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$src/regressions/" \
    "$corpus" "$src/seeds" "$src/regressions" >"$log" 2>&1 || rc=$?
  after="$(ls "$src/regressions" | wc -l)"
  execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)"
  speed="$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)"
  last="$(grep -E '^#[0-9]+' "$log" | tail -1)"
  cov="$(grep -o 'cov: [0-9]*' <<<"$last" | tail -1)"
  ft="$(grep -o 'ft: [0-9]*' <<<"$last" | tail -1)"
  corp="$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' <<<"$last" | tail -1)"
  line="$target: ${execs:-?} execs, ${speed:-?}/s, ${cov:-cov: ?} edges, ${ft:-ft: ?} features, ${corp:-corp: ?} inputs/bytes, new crashers $((after - before)), exit $rc"
  summary+=("$line")
  echo "$line"
  if [ "$rc" -ne 0 ] || [ "$after" -ne "$before" ]; then
    found=1
    grep -E 'ERROR|SUMMARY|fuzz property failed|Test unit written' "$log" | head -20 || true
  fi
done
echo "=== fuzz.sh: summary ==="
printf '%s\n' "${summary[@]}"
exit "$found"
