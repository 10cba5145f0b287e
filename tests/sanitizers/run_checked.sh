#!/usr/bin/env bash
# Runs one test command of a sanitizer build (CTest's COMMAND) and fails it
# when any sanitized process it started wrote a report.
#
# Why a wrapper: the pytest suites start conveyord and the C++ test tools as
# child processes; a report from one of them (a leak found at the daemon's
# exit, a race on a worker thread) would otherwise end up in a log file that
# no assertion reads. Here every sanitized process writes its reports into a
# fresh folder (log_path), and any file there fails the test and is printed.
#
# Usage: run_checked.sh SANITIZER COMMAND... where SANITIZER is "address"
# (ASan + LeakSanitizer + UBSan) or "thread". Options already in the
# environment come first; the ones below are appended (later ones win).
# CONVEYOR_TEST_TIMEOUT_SCALE stretches the suites' deadlines (ASan 3x,
# TSan 10x). The pytest fixtures stop every daemon with SIGTERM at teardown
# (so LeakSanitizer checks it at exit) and tell a sanitized conveyord from
# its binary, skipping absolute-RSS bounds for it (tests/integration/conftest.py).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sanitizer="$1"
shift
reports="$(mktemp -d "${TMPDIR:-/tmp}/conveyor-sanitizer.XXXXXX")"
case "$sanitizer" in
  address)
    export CONVEYOR_TEST_TIMEOUT_SCALE="${CONVEYOR_TEST_TIMEOUT_SCALE:-3}"
    # A leak (checked at every sanitized process's exit) or any UB fails.
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1:halt_on_error=1:check_initialization_order=1:strict_init_order=1:log_path=$reports/asan"
    export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}halt_on_error=1:print_stacktrace=1:log_path=$reports/ubsan"
    ;;
  thread)
    export CONVEYOR_TEST_TIMEOUT_SCALE="${CONVEYOR_TEST_TIMEOUT_SCALE:-10}"
    export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}halt_on_error=1:second_deadlock_stack=1:suppressions=$here/tsan.supp:print_suppressions=0:log_path=$reports/tsan"
    ;;
  *)
    echo "run_checked.sh: unknown sanitizer '$sanitizer'" >&2
    exit 2
    ;;
esac
"$@"
rc=$?
found=0
for f in "$reports"/*; do
  [ -e "$f" ] || continue
  found=1
  echo "=== sanitizer report $(basename "$f") ==="
  cat "$f"
done
rm -rf "$reports"
if [ "$found" -ne 0 ]; then
  echo "run_checked.sh: sanitizer reports above; failing (the command itself exited $rc)" >&2
  exit 1
fi
exit "$rc"
