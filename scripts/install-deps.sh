#!/usr/bin/env bash
# Installs every Debian 12 package that Conveyor's build, tests and benchmarks
# need. Idempotent: packages already present are skipped, and apt is not
# touched at all when nothing is missing. Run as root or with sudo.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config
  # sanitizer runtimes of gcc (ASan, LSan, UBSan, TSan builds in scripts/test.sh)
  libasan8 liblsan0 libubsan1 libtsan2
  # clang (Debian 12: clang-14) for the -Wthread-safety build
  clang
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

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
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
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
