#!/usr/bin/env bash
# The whole test suite (CI runs exactly this, through .ci/run). Installs what
# is missing, then four stages, each in its own build folder (incremental,
# ccache):
#
#   release  Release build of everything; every unit, tool and integration
#            test through CTest (the benchmarks only as their smoke test),
#            and each fuzz target of tests/fuzz replayed over its seeds and
#            regressions (fuzz.<target>; fuzzing itself is scripts/fuzz.sh).
#   asan     AddressSanitizer + LeakSanitizer + UndefinedBehaviorSanitizer
#            build of engine, server, unit tests, tools and conveyord; every
#            test again, the integration suites against the sanitized daemon
#            and the fuzz replays under ASan + UBSan; not the suites whose
#            subject is packaging, deployment files or client-side Python
#            (PACKAGING_SUITES below), nor the checks of the sources.
#   tsan     ThreadSanitizer build of the unit tests and fuzz replays only;
#            the unit tests (engine, side sockets, service, the call
#            protocol under many threads), not the suites that run inside
#            Debian's uninstrumented gRPC.
#   tsa      clang build of core/ and server/ with -Wthread-safety as errors
#            (compile only, build type None).
#
# A sanitizer report from any test, daemon or tool fails its test
# (tests/sanitizers/run_checked.sh). CONVEYOR_TEST_STAGES picks stages
# (default: all four, in this order); each stage's wall time is printed at
# the end. Exits non-zero on the first failing stage.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STAGES="${CONVEYOR_TEST_STAGES:-release asan tsan tsa}"
JOBS="${JOBS:-$(nproc)}"
export JOBS
# The virtual environments of scripts/venvs/ (scripts/venv.sh) live in the
# user's cache, not in the checkout, so a fresh clone (CI's) reuses the ones
# an earlier run made instead of installing TensorFlow, JAX and the
# validators from PyPI again; each is remade when its pinned file changes.
# (Without HOME nor XDG_CACHE_HOME: .venvs/ of the checkout, venv.sh's own default.)
if [ -z "${CONVEYOR_VENV_DIR:-}" ]; then
  cache_home="${XDG_CACHE_HOME:-${HOME:+$HOME/.cache}}"
  CONVEYOR_VENV_DIR="${cache_home:+$cache_home/conveyor/venvs}"
  CONVEYOR_VENV_DIR="${CONVEYOR_VENV_DIR:-$ROOT/.venvs}"
fi
export CONVEYOR_VENV_DIR

"$ROOT/scripts/install-deps.sh"

# The benchmark smoke test measures throughput of Release builds; under a
# sanitizer it only takes time. The framework adapters' suites test Python
# code in the frameworks' own interpreters against a daemon that the other
# suites already run sanitized.
SANITIZED_EXCLUDE="pytest.python.test_bench_smoke|pytest.python.test_peers_smoke|pytest.integration.test_jax_adapter|pytest.integration.test_tensorflow_adapter|pytest.integration.test_fields_frameworks"
# Checks of the sources themselves (the include graph, clang-format): the
# same in every build, so only the release stage runs them.
SOURCE_CHECKS="^layers\\.|^style\\."
# Suites whose subject is packaging, deployment files or the Python
# client's own logic: they run no sanitized code of ours that the other
# suites do not (the client package's pip and mypy runs, the GPU bundle,
# the Kubernetes manifests, the Dockerfile's package lists, the installed
# systemd unit, the READMEs' commands, which run only against build/, and
# the client-side tests without a daemon), so only the release stage runs
# them.
PACKAGING_SUITES="pytest.integration.test_client_package|pytest.integration.test_gpu_bundle|pytest.integration.test_k8s_manifests|pytest.integration.test_dockerfile|pytest.integration.test_systemd_unit|pytest.integration.test_readme_commands|pytest.python.test_cli_top_render|pytest.python.test_client_addresses|pytest.python.test_cuda_client_paths|pytest.python.test_cuda_copy_seam|pytest.python.test_device_array|pytest.python.test_gen_imagenet_like|pytest.python.test_skipped_exit|pytest.integration.test_slurm_recipe|pytest.python.test_pool_units"
TIMES=()

# The cached virtual environments of scripts/venvs/ (framework adapters,
# validators): made before the tests, so that the first test that needs one
# does not spend its CTest TIMEOUT on pip.
make_venvs() {
  local req
  for req in "$ROOT"/scripts/venvs/*.txt; do
    [ -e "$req" ] || continue
    # Benchmark-only peers too big for CI (DALI: 0.5 GB of wheels); the
    # smoke test skips them unless made by hand (scripts/venv.sh NAME).
    if grep -q '^# bench-only' "$req"; then continue; fi
    "$ROOT/scripts/venv.sh" "$(basename "$req" .txt)" >/dev/null
  done
}

stage_release() {
  local dir="${BUILD_DIR:-$ROOT/build}"
  BUILD_DIR="$dir" "$ROOT/scripts/build.sh"
  make_venvs
  ctest --test-dir "$dir" --output-on-failure -j "$JOBS"
}

stage_asan() {
  local dir="${ASAN_DIR:-$ROOT/build-asan}"
  BUILD_DIR="$dir" "$ROOT/scripts/build.sh" -DCMAKE_BUILD_TYPE=Debug -DCONVEYOR_ASAN=ON \
    -DCONVEYOR_BUILD_SERVER=ON -DCONVEYOR_BUILD_TESTS=ON -DCONVEYOR_BUILD_BENCH=OFF
  ctest --test-dir "$dir" --output-on-failure -j "$JOBS" \
    -E "$SANITIZED_EXCLUDE|$SOURCE_CHECKS|$PACKAGING_SUITES"
}

stage_tsan() {
  local dir="${TSAN_DIR:-$ROOT/build-tsan}"
  # Without CUDA: the CUDA runtime is not built with TSan either, and this is
  # the stage that proves a build without CUDA (the device transport's logic
  # runs here on the host model all the same).
  # Only what the unit tests and fuzz replays need (conveyor_unit_checks):
  # conveyord, the test tools and the client's programs serve the suites
  # this stage does not run.
  BUILD_TARGETS=conveyor_unit_checks BUILD_DIR="$dir" "$ROOT/scripts/build.sh" \
    -DCMAKE_BUILD_TYPE=Debug -DCONVEYOR_TSAN=ON \
    -DCONVEYOR_BUILD_SERVER=ON -DCONVEYOR_BUILD_TESTS=ON -DCONVEYOR_BUILD_BENCH=OFF \
    -DCONVEYOR_CUDA=OFF
  # The unit tests: the engine's threads, the side sockets' threads, the
  # service, and the gRPC call's protocol (server/service/stream_call.*) driven by
  # many threads through a fake RPC. Not what runs inside gRPC: Debian's
  # gRPC is not built with TSan, so a TSan conveyord (and the unit tests
  # that use an in-process gRPC server) report gRPC's own hand-offs between
  # its threads (call objects, callback tags, status payloads) as races in
  # every suite; the integration suites run under ASan+UBSan instead
  # (README, "Testing"). The same goes for the unit tests that start an
  # in-process gRPC server ("service over gRPC", and "probe:", which asks
  # gRPC's own health service).
  ctest --test-dir "$dir" --output-on-failure -j "$JOBS" \
    -E "^pytest\.|^service over gRPC|^probe:|$SOURCE_CHECKS"
}

stage_tsa() {
  local dir="${TSA_DIR:-$ROOT/build-tsa}"
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    # Build type None: no optimisation and no debug information, since
    # compiling is the whole check.
    CC=clang CXX=clang++ BUILD_DIR="$dir" "$ROOT/scripts/build.sh" -DCMAKE_BUILD_TYPE=None \
      -DCONVEYOR_THREAD_SAFETY=ON -DCONVEYOR_BUILD_TESTS=OFF -DCONVEYOR_BUILD_BENCH=OFF
  else
    BUILD_DIR="$dir" "$ROOT/scripts/build.sh"
  fi
}

for stage in $STAGES; do
  case "$stage" in
    release | asan | tsan | tsa) ;;
    *)
      echo "test.sh: unknown stage '$stage' (release, asan, tsan, tsa)" >&2
      exit 2
      ;;
  esac
  echo "=== test.sh: stage $stage ==="
  start=$SECONDS
  "stage_$stage"
  TIMES+=("$stage $((SECONDS - start)) s")
  echo "=== test.sh: stage $stage passed in $((SECONDS - start)) s ==="
done
echo "test.sh: all stages passed: ${TIMES[*]}"
