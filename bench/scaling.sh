#!/usr/bin/env bash
# Thread scaling of the engine (ceiling_bench) and the daemon (conveyord + the
# C++ client fetch_batches) on a machine without the build: packs the binaries,
# their shared libraries and a generated JPEG data set into one folder that
# runs anywhere on x86-64 Linux, with nothing else installed.
#
#   bench/scaling.sh pack DIR [--build BUILD] [--images N]
#       (here) copies build/server/conveyord, build/bench/ceiling_bench and
#       build/client/cpp/fetch_batches (stripped) to DIR/bin, the libraries
#       ldd lists for them to DIR/lib (glibc's own to DIR/glibc, with its
#       loader), N JPEGs of gen_imagenet_like.py (default 128, ~13 MB) to DIR/data,
#       and this script as DIR/run.sh.
#   DIR/run.sh
#       (there) for each thread count: ceiling_bench --seconds, then
#       conveyord (threads: N in a generated config) on a unix socket with
#       fetch_batches --seconds reading batches of 64 (4 credits, shared
#       memory); prints a table and JSON of images/s and scaling efficiency
#       images/s(N) / (N x images/s(1)); the JSON is also written to
#       $SCALING_OUT (default DIR/scaling.json).
#   Environment of run.sh: SCALING_THREADS ("1 2 4 8 16"), SCALING_SECONDS
#   (timed seconds per run, 8), SCALING_WARMUP (seconds, 2), SCALING_ROUNDS
#   (alternating rounds, 2; the median is reported), SCALING_LOADER
#   (auto | system | bundled: the host's glibc with LD_LIBRARY_PATH=DIR/lib,
#   or DIR/glibc's loader and libc; auto takes system when it works).
#   With the defaults: 5 counts x 2 rounds x 2 runs x (8 + 2 + ~1) s, about
#   4 minutes.
set -euo pipefail

die() { echo "scaling.sh: $*" >&2; exit 1; }

# ------------------------------------------------------------------ pack
GLIBC_RE='^(ld-linux[-a-z0-9_.]*|libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|libmvec)\.so'

pack() {
  local dir="" build="" images=128
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  while [ $# -gt 0 ]; do
    case "$1" in
      --build) build="$2"; shift 2 ;;
      --images) images="$2"; shift 2 ;;
      -*) die "unknown flag $1" ;;
      *) [ -z "$dir" ] || die "one DIR only"; dir="$1"; shift ;;
    esac
  done
  [ -n "$dir" ] || die "usage: scaling.sh pack DIR [--build BUILD] [--images N]"
  build="${build:-$root/build}"
  local bins=("$build/server/conveyord" "$build/bench/ceiling_bench"
              "$build/client/cpp/fetch_batches")
  for b in "${bins[@]}"; do [ -x "$b" ] || die "$b not built (cmake --build $build --target conveyord ceiling_bench fetch_batches)"; done
  [ ! -e "$dir" ] || [ -z "$(ls -A "$dir")" ] || die "$dir exists and is not empty"
  mkdir -p "$dir/bin" "$dir/lib" "$dir/glibc"
  for b in "${bins[@]}"; do
    cp "$b" "$dir/bin/"
    strip --strip-unneeded "$dir/bin/$(basename "$b")"
  done
  # The closure: ldd resolves the whole tree of DT_NEEDED (and prints the
  # loader as an absolute path without "=>").
  local libs
  libs="$(for b in "${bins[@]}"; do ldd "$b"; done |
          awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)"
  for l in $libs; do
    if [[ "$(basename "$l")" =~ $GLIBC_RE ]]; then
      cp -L "$l" "$dir/glibc/"
    else
      cp -L "$l" "$dir/lib/"
    fi
  done
  [ -n "$(ls "$dir/glibc" | grep '^ld-linux')" ] || die "no ld-linux loader found by ldd"
  /usr/bin/python3 "$root/bench/gen_imagenet_like.py" --out "$dir/data" --images "$images" \
      --classes 8 --seed 11 >/dev/null
  cp "${BASH_SOURCE[0]}" "$dir/run.sh"
  chmod +x "$dir/run.sh"
  {
    echo "packed $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -srm)"
    echo "commit $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "host glibc $(getconf GNU_LIBC_VERSION 2>/dev/null || echo unknown)"
    echo "newest GLIBC symbol version needed: $(for f in "$dir"/bin/* "$dir"/lib/*; do
        objdump -T "$f" 2>/dev/null; done | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
    echo "images $images in $dir/data ($(du -sh "$dir/data" | cut -f1))"
    echo "files:"; (cd "$dir" && ls -l bin lib glibc | grep -v '^total')
  } > "$dir/MANIFEST"
  du -sh "$dir"/bin "$dir"/lib "$dir"/glibc "$dir"/data; du -sh "$dir"
}

# ------------------------------------------------------------------ run
run_all() {
  local dir
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  [ -x "$dir/bin/conveyord" ] || die "$dir/bin/conveyord missing: run.sh runs inside a packed DIR"
  local threads="${SCALING_THREADS:-1 2 4 8 16}" secs="${SCALING_SECONDS:-8}"
  local warm="${SCALING_WARMUP:-2}" rounds="${SCALING_ROUNDS:-2}"
  local out="${SCALING_OUT:-$dir/scaling.json}"
  local loader="${SCALING_LOADER:-auto}"
  local loader_bin
  loader_bin="$(ls "$dir"/glibc/ld-linux* | head -1)"
  run_bin() {  # run_bin NAME ARGS...: in a subshell that becomes the program
    local name="$1"; shift
    if [ "$loader" = bundled ]; then
      (exec "$loader_bin" --library-path "$dir/lib:$dir/glibc" "$dir/bin/$name" "$@")
    else
      (LD_LIBRARY_PATH="$dir/lib" exec "$dir/bin/$name" "$@")
    fi
  }
  if [ "$loader" = auto ]; then
    loader=system
    if ! run_bin ceiling_bench --help >/dev/null 2>&1 || ! run_bin conveyord --help >/dev/null 2>&1; then
      loader=bundled
    fi
  fi
  run_bin ceiling_bench --help >/dev/null || die "ceiling_bench does not start (loader $loader)"
  work=""
  work="$(mktemp -d /tmp/cv-scaling.XXXXXX)"
  daemon_pid=""
  trap '[ -z "${daemon_pid:-}" ] || kill "$daemon_pid" 2>/dev/null || true; [ -z "${work:-}" ] || rm -rf "$work"' EXIT

  local cpus model
  cpus="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)"
  model="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)"
  echo "scaling: $cpus CPUs ($model), $(uname -sr), loader $loader; threads: $threads;" \
       "$rounds rounds of ${secs} s after ${warm} s; $(ls "$dir/data"/*/* | wc -l) images" >&2

  ceiling_once() {  # prints images/s
    run_bin ceiling_bench --root "$dir/data" --threads "$1" --seconds "$secs" \
        --warmup-seconds "$warm" --json | sed -n 's/.*"images_per_s": \([0-9.]*\).*/\1/p'
  }
  daemon_once() {  # prints images/s
    local n="$1" run
    run="$(mktemp -d "$work/d.XXXXXX")"
    local cfg="$run/conveyord.yaml" sock="$run/conveyor.sock"
    cat > "$cfg" <<EOF
threads: $n
log_level: warn
pipelines:
  train:
    dataset:
      root: "$dir/data"
    augment: train
    size: 224
    layout: nchw
    dtype: uint8
EOF
    run_bin conveyord --config "$cfg" --socket "$sock" --tcp none > "$run/conveyord.log" 2>&1 &
    daemon_pid=$!
    local i=0
    while [ ! -S "$sock" ]; do
      i=$((i + 1))
      if [ "$i" -gt 300 ] || ! kill -0 "$daemon_pid" 2>/dev/null; then
        cat "$run/conveyord.log" >&2; die "conveyord did not start"
      fi
      sleep 0.1
    done
    # Warm-up by batches: the first ones fill the pipeline; then ~secs timed.
    local line
    line="$(run_bin fetch_batches --server "unix://$sock" --pipeline train --batch-size 64 \
            --credits 4 --epochs 0 --quiet --seconds "$secs" \
            --warmup-batches $((8 + 4 * n)) | grep '^done')" || {
      cat "$run/conveyord.log" >&2; die "fetch_batches failed at $n threads"; }
    kill "$daemon_pid"; wait "$daemon_pid" 2>/dev/null || true
    daemon_pid=""
    echo "$line" | sed -n 's/.*images_per_s=\([0-9.]*\).*/\1/p'
  }

  local n r
  declare -A ceil dmn
  for r in $(seq 1 "$rounds"); do
    for n in $threads; do
      ceil[$n]+="$(ceiling_once "$n") "
      dmn[$n]+="$(daemon_once "$n") "
      echo "  round $r, $n threads: ceiling ${ceil[$n]}| daemon ${dmn[$n]}" >&2
    done
  done
  median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {
      if (NR == 0) print 0; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2 }'; }
  local first="" c1="" d1=""
  printf '%-8s %14s %11s %14s %11s %15s\n' threads "ceiling img/s" efficiency "daemon img/s" \
      efficiency "daemon/ceiling"
  local json="{\"cpus\": $cpus, \"cpu_model\": \"$model\", \"loader\": \"$loader\", \"seconds\": $secs,"
  json+=" \"warmup_seconds\": $warm, \"rounds\": $rounds, \"batch_size\": 64, \"credits\": 4, \"rows\": ["
  for n in $threads; do
    local c d ce de
    c="$(echo "${ceil[$n]}" | median)"; d="$(echo "${dmn[$n]}" | median)"
    if [ -z "$first" ]; then first="$n"; c1="$c"; d1="$d"; fi
    ce="$(awk -v c="$c" -v c1="$c1" -v n="$n" -v n1="$first" 'BEGIN {printf "%.3f", c * n1 / (n * c1)}')"
    de="$(awk -v c="$d" -v c1="$d1" -v n="$n" -v n1="$first" 'BEGIN {printf "%.3f", c * n1 / (n * c1)}')"
    printf '%-8s %14.1f %11s %14.1f %11s %15s\n' "$n" "$c" "$ce" "$d" "$de" \
        "$(awk -v a="$d" -v b="$c" 'BEGIN {printf "%.3f", a / b}')"
    json+="$( [ "$n" = "$first" ] || echo ", "){\"threads\": $n, \"ceiling_images_per_s\": $c,"
    json+=" \"ceiling_runs\": [$(echo ${ceil[$n]} | sed 's/ /, /g')], \"ceiling_efficiency\": $ce,"
    json+=" \"daemon_images_per_s\": $d, \"daemon_runs\": [$(echo ${dmn[$n]} | sed 's/ /, /g')],"
    json+=" \"daemon_efficiency\": $de}"
  done
  json+="]}"
  echo "efficiency = images/s(N) / (N/$first x images/s($first))"
  echo "$json"
  echo "$json" > "$out"
  echo "wrote $out" >&2
}

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//'; }

case "$(basename "$0")" in
  run.sh)
    case "${1:-}" in -h|--help) usage; exit 0 ;; esac
    run_all "$@" ;;
  *)
    case "${1:-}" in
      -h|--help) usage ;;
      pack) shift; pack "$@" ;;
      *) die "usage: scaling.sh pack DIR [--build BUILD] [--images N]   (then DIR/run.sh)" ;;
    esac ;;
esac
