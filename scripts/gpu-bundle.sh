#!/usr/bin/env bash
# Packs what a bare GPU host needs to run the GPU checks into one folder and a tarball:
#
#   scripts/gpu-bundle.sh [--no-tar] [--xz] [OUT_DIR]
#
# OUT_DIR (default: <build>/gpu-bundle, git-ignored) gets
#   bin/conveyord        launcher: runs libexec/conveyord with LD_LIBRARY_PATH=<bundle>/lib
#   libexec/conveyord    the daemon of the build folder ($CONVEYOR_BUILD_DIR, default build/)
#   lib/                 every shared library it loads (the `ldd` closure) but glibc's own
#                        (libc, libm, libdl, librt, libpthread, libresolv, ..., ld-linux);
#                        libstdc++ and libgcc_s are copied: the GPU host's may be older
#   python/conveyor/     the Python client with its generated gRPC stubs (conveyor/_proto)
#   python-fallback/     PIL/ (Pillow for CPython 3.12: the dataset generator) and pytest/,
#                        each put on sys.path by gpu-check.sh only when the host's Python
#                        lacks that module; absent when the wheels could not be fetched
#                        (offline, or $CONVEYOR_GPU_BUNDLE_OFFLINE set: then only wheels
#                        cached before in .venvs/wheels are used)
#   bench/               gen_imagenet_like.py, gpu_landing.py and the modules they import
#   tests/gpu/           the GPU tests (pytest) and the bundle's host-only smoke
#   tests/support/       skipped_exit.py (the pytest plugin of "skipped" runs)
#   gpu-check.sh         the one command to run on the GPU host (scripts/gpu-check.sh)
#   MANIFEST.json        git commit, build flags, CUDA or not, date, glibc needed, files
#   SHA256SUMS           of every file (gpu-check.sh verifies them before it starts)
# and, unless --no-tar, OUT_DIR.tar.gz beside it (--xz: OUT_DIR.tar.xz, smaller, slower).
#
# Fails (non-zero, naming it) when conveyord or the stubs are not built, when a library does
# not resolve, or when the stubs do not import under Debian's python3 -W error or, when the
# venv exists (scripts/venv.sh gpu-host), under its newer protobuf and grpcio; in that case
# the stubs are regenerated with the venv's grpcio-tools and checked again under both.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$(cd "${CONVEYOR_BUILD_DIR:-$ROOT/build}" && pwd)"
make_tar=1
compress=gz
out=""
for arg in "$@"; do
  case "$arg" in
    --no-tar) make_tar=0 ;;
    --xz) compress=xz ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    -*) echo "gpu-bundle.sh: unknown option $arg" >&2; exit 2 ;;
    *) out="$arg" ;;
  esac
done
out="${out:-$BUILD/gpu-bundle}"
DAEMON="$BUILD/server/conveyord"
STUBS="$BUILD/python/conveyor/_proto"
PY=/usr/bin/python3
die() { echo "gpu-bundle.sh: $*" >&2; exit 1; }

[ -x "$DAEMON" ] || die "no conveyord at $DAEMON (cmake --build $BUILD --target conveyord)"
[ -f "$STUBS/__init__.py" ] || die "no stubs at $STUBS (cmake --build $BUILD --target conveyor_python_stubs)"

rm -rf "$out"
mkdir -p "$out"/{bin,libexec,lib,python,bench,tests/gpu,tests/support}
out="$(cd "$out" && pwd)"

# --- the daemon and its libraries ---------------------------------------------------------
cp "$DAEMON" "$out/libexec/conveyord"
# glibc's own libraries: the host's glibc must be used with its own loader.
is_glibc() {
  case "$1" in
    linux-vdso.so.*|ld-linux*.so.*|libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|\
    libresolv.so.*|libutil.so.*|libanl.so.*|libmvec.so.*|libnsl.so.*|libBrokenLocale.so.*|\
    libthread_db.so.*|libnss_*.so.*) return 0 ;;
  esac
  return 1
}
ldd_out="$(ldd "$out/libexec/conveyord")"
if grep -q 'not found' <<<"$ldd_out"; then
  die "libraries of conveyord not found here: $(grep 'not found' <<<"$ldd_out" | tr -s ' \t' ' ')"
fi
while read -r name arrow path _; do
  [ "$arrow" = "=>" ] || continue
  is_glibc "$name" && continue
  cp -L "$path" "$out/lib/$name"
done <<<"$ldd_out"
# Every library must now resolve inside lib/ (or be glibc's).
while read -r name arrow path _; do
  [ "$arrow" = "=>" ] || continue
  is_glibc "$name" && continue
  case "$path" in "$out/lib/"*) ;; *) die "$name resolves outside the bundle: $path" ;; esac
done < <(LD_LIBRARY_PATH="$out/lib" ldd "$out/libexec/conveyord")

cat >"$out/bin/conveyord" <<'EOF'
#!/bin/sh
# conveyord of this bundle, with the bundle's shared libraries (lib/) ahead of the host's.
here="$(cd "$(dirname "$0")/.." && pwd)"
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/libexec/conveyord" "$@"
EOF
chmod +x "$out/bin/conveyord"

# --- the Python client and its stubs ------------------------------------------------------
(cd "$ROOT/client/python" && tar cf - --exclude=__pycache__ --exclude='*.pyc' conveyor) |
  (cd "$out/python" && tar xf -)
(cd "$BUILD/python/conveyor" && tar cf - --exclude=__pycache__ --exclude='*.pyc' _proto) |
  (cd "$out/python/conveyor" && tar xf -)

stubs_load() {  # PYTHON: imports the bundle's client and stubs with warnings as errors
  env -i PATH=/usr/bin:/bin PYTHONPATH="$out/python" PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1 \
    "$1" -W error -c 'import conveyor, conveyor.loader
from conveyor._proto.v1 import conveyor_pb2, conveyor_pb2_grpc
from conveyor._proto.grpc.health.v1 import health_pb2, health_pb2_grpc'
}
VENV_PY="${CONVEYOR_VENV_DIR:-$ROOT/.venvs}/gpu-host/bin/python"
stubs_from="protoc of the build ($BUILD)"
stubs_load "$PY" || die "the bundle's stubs do not import under $PY"
if [ -x "$VENV_PY" ] && ! stubs_load "$VENV_PY"; then
  echo "gpu-bundle.sh: the build's stubs fail under the gpu-host venv; regenerating them" >&2
  rm -rf "$out/python/conveyor/_proto"
  stage="$(mktemp -d)"
  # No protoc on PATH: gen_stubs.py then takes the venv's grpc_tools.
  env -i PATH="$(dirname "$VENV_PY")" "$VENV_PY" "$ROOT/client/python/gen_stubs.py" --out "$stage"
  mv "$stage/conveyor/_proto" "$out/python/conveyor/_proto"
  rm -rf "$stage"
  stubs_from="grpcio-tools of $("$VENV_PY" -c 'import importlib.metadata as m; print(m.version("grpcio-tools"))')"
  stubs_load "$PY" || die "regenerated stubs do not import under $PY"
  stubs_load "$VENV_PY" || die "regenerated stubs do not import under $VENV_PY"
fi
venv_versions="none (scripts/venv.sh gpu-host not made)"
if [ -x "$VENV_PY" ]; then
  venv_versions="$("$VENV_PY" -c 'import google.protobuf as p, grpc, sys; print("python %d.%d, protobuf %s, grpcio %s" % (sys.version_info[0], sys.version_info[1], p.__version__, grpc.__version__))')"
fi

# What the GPU host's Python may lack (it has torch, CuPy, JAX, grpcio, protobuf, numpy): Pillow
# for CPython 3.12 (the dataset generator) and pytest, unpacked from wheels fetched once per
# machine into python-fallback/<module>/; gpu-check.sh puts one on sys.path only when the
# host cannot import that module.
wheels="${CONVEYOR_VENV_DIR:-$ROOT/.venvs}/wheels"
FALLBACK_WHEELS="pillow==11.3.0 pytest==8.3.5 pluggy==1.5.0 iniconfig==2.1.0 packaging==25.0"
have_wheel() { ls "$wheels/${1%%==*}-${1##*==}-"*.whl >/dev/null 2>&1; }  # NAME==VERSION
missing=""
for req in $FALLBACK_WHEELS; do have_wheel "$req" || missing="$missing $req"; done
if [ -n "$missing" ] && [ -z "${CONVEYOR_GPU_BUNDLE_OFFLINE:-}" ]; then
  timeout 120 "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --platform manylinux_2_28_x86_64 --implementation cp \
    $missing -d "$wheels" >&2 || echo "gpu-bundle.sh: could not fetch$missing (offline?)" >&2
fi
fallbacks=""
unpack() {  # MODULE COUNT WHEEL...: only when all COUNT wheels are there
  local module="$1" count="$2" w
  shift 2
  [ "$#" -eq "$count" ] || return 0
  mkdir -p "$out/python-fallback/$module"
  for w in "$@"; do
    "$PY" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
      "$w" "$out/python-fallback/$module"
  done
  fallbacks="$fallbacks $module"
}
shopt -s nullglob
unpack PIL 1 "$wheels"/pillow-11.3.0-cp312-*.whl
unpack pytest 4 "$wheels"/pytest-8.3.5-*.whl "$wheels"/pluggy-1.5.0-*.whl \
  "$wheels"/iniconfig-2.1.0-*.whl "$wheels"/packaging-25.0-*.whl
shopt -u nullglob

# --- benchmarks, tests, the check script --------------------------------------------------
for f in gen_imagenet_like.py gpu_landing.py vs_dataloader.py proc_sampler.py daemon_proc.py; do
  cp "$ROOT/bench/$f" "$out/bench/"
done
(cd "$ROOT/tests/gpu" && tar cf - --exclude=__pycache__ --exclude='*.pyc' .) |
  (cd "$out/tests/gpu" && tar xf -)
cp "$ROOT/tests/support/skipped_exit.py" "$out/tests/support/"
cp "$ROOT/scripts/gpu-check.sh" "$out/gpu-check.sh"
chmod +x "$out/gpu-check.sh"

# --- manifest and checksums ---------------------------------------------------------------
commit="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
dirty="$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null | head -c1 | wc -c)"
cache_get() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt" | head -n1; }
cuda_linked=false
if grep -q -a -E 'libcuda\.so|cudaGetDeviceCount' "$out/libexec/conveyord"; then cuda_linked=true; fi
# The newest glibc symbol version anything in the bundle needs (the host must have it).
glibc_needed="$( (objdump -T "$out/libexec/conveyord" "$out"/lib/*.so* 2>/dev/null || true) |
  grep -o 'GLIBC_[0-9.]*' | sort -u -t. -k1,1 -k2,2n -k3,3n | tail -n1)"
(cd "$out" && find . -type f ! -name SHA256SUMS ! -name MANIFEST.json -print0 | sort -z |
  xargs -0 sha256sum) >"$out/SHA256SUMS"
"$PY" - "$out/MANIFEST.json" <<EOF
import json, sys, time
json.dump({
    "what": "conveyor GPU bundle (scripts/gpu-bundle.sh); run ./gpu-check.sh on the GPU host",
    "git_commit": "$commit",
    "git_dirty": bool(int("$dirty")),
    "built_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "build_dir_flags": {
        "CMAKE_BUILD_TYPE": "$(cache_get CMAKE_BUILD_TYPE)",
        "CMAKE_CXX_FLAGS": "$(cache_get CMAKE_CXX_FLAGS)",
        "CONVEYOR_CUDA": "$(cache_get CONVEYOR_CUDA)",
        "CMAKE_CUDA_COMPILER": "$(cache_get CMAKE_CUDA_COMPILER)",
    },
    "conveyord_has_cuda": $( [ "$cuda_linked" = true ] && echo True || echo False ),
    "glibc_needed": "$glibc_needed",
    "libraries": $(ls "$out/lib" | wc -l),
    "stubs_from": "$stubs_from",
    "stubs_checked_under": ["$("$PY" -c 'import google.protobuf as p, grpc, sys; print("python %d.%d, protobuf %s, grpcio %s" % (sys.version_info[0], sys.version_info[1], p.__version__, grpc.__version__))')", "$venv_versions"],
    "python_fallbacks": "${fallbacks# }".split(),
}, open(sys.argv[1], "w"), indent=2)
EOF

size="$(du -sb "$out" | cut -f1)"
echo "gpu-bundle.sh: $out ($((size / 1048576)) MiB, $(ls "$out/lib" | wc -l) libraries," \
  "conveyord CUDA: $cuda_linked, needs $glibc_needed)" >&2
if [ "$cuda_linked" != true ]; then
  echo "gpu-bundle.sh: warning: this conveyord has no CUDA in it (built without the toolkit, or" \
    "before the GPU path): on the GPU host its device-memory tests will fail" >&2
fi
if [ "$make_tar" = 1 ]; then
  tarball="$out.tar.$compress"
  flag=z; [ "$compress" = xz ] && flag=J
  (cd "$(dirname "$out")" && XZ_OPT="${XZ_OPT:--6 -T2}" tar c${flag}f "$tarball" "$(basename "$out")")
  tsize="$(stat -c %s "$tarball")"
  echo "gpu-bundle.sh: $tarball ($((tsize / 1048576)) MiB)" >&2
  if [ "$tsize" -ge $((40 * 1048576)) ]; then
    echo "gpu-bundle.sh: warning: the tarball is over 40 MiB" >&2
  fi
fi
echo "$out"
