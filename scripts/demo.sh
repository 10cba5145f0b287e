#!/usr/bin/env bash
# The main job on a demo dataset: installs what is missing, builds, generates
# a small ImageNet-like dataset (demo-data/train), starts conveyord with
# config/demo.yaml (through conveyor.daemon, the launcher the tests and
# benchmarks use), streams epochs through the Python client, prints images/s,
# and stops the daemon.
#   DEMO_IMAGES (default 1000)  images to generate (once; kept for later runs)
#   DEMO_EPOCHS (default 2)     epochs to stream
#   DEMO_SOCKET (default /tmp/conveyor-demo/conveyor.sock)  the daemon's socket
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY=/usr/bin/python3
IMAGES="${DEMO_IMAGES:-1000}"
EPOCHS="${DEMO_EPOCHS:-2}"

"$ROOT/scripts/install-deps.sh"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
export BUILD_DIR
"$ROOT/scripts/build.sh"

if [ ! -f demo-data/.complete-"$IMAGES" ]; then
  rm -rf demo-data/train
  "$PY" bench/gen_imagenet_like.py --out demo-data/train --images "$IMAGES" --classes 10 --seed 0
  touch demo-data/.complete-"$IMAGES"
fi

# DEMO_SOCKET: another path when a daemon already serves on the default one
# (the launcher refuses a socket in use and names the pid using it).
SOCKET="${DEMO_SOCKET:-/tmp/conveyor-demo/conveyor.sock}"
# conveyor.daemon (the project's launcher) starts conveyord, waits for its
# health check to say SERVING, runs the client commands with
# $CONVEYOR_SERVER set, then stops the daemon (SIGTERM) and exits with the
# commands' status. The package's gRPC stubs are the build's (build/python).
export PYTHONPATH="$BUILD_DIR/python:$ROOT/client/python"
"$PY" -m conveyor.daemon --conveyord "$BUILD_DIR/server/conveyord" --config config/demo.yaml \
  --socket "$SOCKET" -- bash -c '
    set -e
    "$0" client/python/examples/stream_epoch.py --server "$CONVEYOR_SERVER" \
      --pipeline demo-train --batch-size 64 --epochs "$1"
    "$0" -m conveyor stats --server "$CONVEYOR_SERVER"' "$PY" "$EPOCHS"
