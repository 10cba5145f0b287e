#!/usr/bin/env bash
# Installs every Debian 12 package that Conveyor's build, tests and benchmarks
# need. Idempotent: packages already present are skipped, and apt is not
# touched at all when nothing is missing. Run as root or with sudo.
#
#   scripts/install-deps.sh [--bench]
#
# --bench also installs nginx-light and libnginx-mod-http-lua: the object
# server of bench/remote_http.py (bench/nginx_object_server.py runs its own
# nginx processes on loopback ports). Opt-in because installing Debian's
# nginx enables and starts a system web server on port 80; when this run is
# the one that installs it, that service is stopped and disabled again (an
# nginx that was installed before is left as it is).
set -euo pipefail

BENCH=0
for arg in "$@"; do
  case "$arg" in
    --bench) BENCH=1 ;;
    -h|--help) sed -n '2,/^set -euo pipefail/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "install-deps: unknown argument '$arg' (--bench, --help)" >&2; exit 2 ;;
  esac
done

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config
  # sanitizer runtimes of gcc (ASan, LSan, UBSan, TSan builds in scripts/test.sh)
  libasan8 liblsan0 libubsan1 libtsan2
  # clang (Debian 12: clang-14) for the -Wthread-safety build; clang-format
  # for the C++ style (.clang-format; CTest style.clang_format)
  clang clang-format
  # gRPC / protobuf (abseil comes with them)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  # TLS of the data socket, token digests (gRPC brings its own TLS)
  libssl-dev openssl
  # decoders
  libturbojpeg0-dev libjpeg62-turbo-dev
  libavcodec-dev libavformat-dev libavutil-dev libswscale-dev libswresample-dev
  # test media (video, audio, PNG/WebP/...) made by the tests; PyAV for the benchmarks
  ffmpeg python3-av
  # logging, config, tests
  libspdlog-dev libfmt-dev libyaml-cpp-dev catch2
  # Python client, tests and benchmarks (Debian's interpreter)
  python3 python3-grpcio python3-protobuf python3-numpy python3-pytest
  python3-pil python3-torch python3-torchvision python3-matplotlib
  # virtual environments for what only PyPI has (scripts/venv.sh)
  python3-venv
  # test data: cjpeg/jpegtran make progressive and arithmetic-coded JPEGs
  libjpeg-turbo-progs
  # memory and process figures in integration tests
  procps
  # several hosts on one machine (network namespaces, veth pairs) for the
  # multi-daemon tests and bench/pool.py; taskset (util-linux) pins daemons
  iproute2 util-linux
  # `conveyor top` and the fetch progress bar tested on a real terminal
  tmux
  # systemd notifications of conveyord (sd_notify; optional at build time),
  # and systemd-analyze, which the tests run on the installed unit
  libsystemd-dev systemd
  # the Prometheus metrics endpoint's HTTP server
  libcivetweb-dev
  # datasets over HTTP(S) and S3 (remote/: libcurl's multi interface, SigV4)
  libcurl4-openssl-dev
  # zlib: the PNG decompression-bomb check of the image decoder
  zlib1g-dev
  # Pillow-SIMD built from its sdist for bench/vs_peers.py (scripts/venvs/pillow-simd.txt)
  libjpeg-dev zlib1g-dev
)
if [ "$BENCH" -eq 1 ]; then
  # nginx with the Lua module (ngx.sleep: the latency) for bench/remote_http.py
  PACKAGES+=(nginx-light libnginx-mod-http-lua)
fi

installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

missing=()
for p in "${PACKAGES[@]}"; do
  if ! installed "$p"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# nginx-common holds the nginx service (systemd unit and init script).
had_nginx_service=0
if installed nginx-common; then had_nginx_service=1; fi
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"

if [ "$BENCH" -eq 1 ] && [ "$had_nginx_service" -eq 0 ] && installed nginx-common; then
  # The package enabled (and, unless port 80 was taken, started) a system web
  # server; the benchmark needs none of it.
  echo "install-deps: stopping and disabling the system nginx service the install started"
  if [ "$(cat /proc/1/comm 2>/dev/null || true)" = "systemd" ]; then
    $SUDO systemctl disable --now nginx.service ||
      echo "install-deps: warning: could not disable nginx.service" >&2
  else
    if command -v update-rc.d >/dev/null 2>&1; then
      $SUDO update-rc.d nginx disable >/dev/null 2>&1 || true
    fi
    if [ -x /etc/init.d/nginx ] && $SUDO /etc/init.d/nginx status >/dev/null 2>&1; then
      if command -v service >/dev/null 2>&1; then
        $SUDO service nginx stop || echo "install-deps: warning: could not stop nginx" >&2
      else
        $SUDO /etc/init.d/nginx stop || echo "install-deps: warning: could not stop nginx" >&2
      fi
    fi
  fi
fi
