#!/usr/bin/env bash
# The main job on a demo dataset: installs what is missing, builds, generates
# a small ImageNet-like dataset (demo-data/train), starts conveyord with
# config/demo.yaml, streams epochs through the Python client, prints
# images/s, and stops the daemon.
#   DEMO_IMAGES (default 1000)  images to generate (once; kept for later runs)
#   DEMO_EPOCHS (default 2)     epochs to stream
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

SOCKET=/tmp/conveyor-demo/conveyor.sock
LOG=$(mktemp /tmp/conveyord-demo.XXXXXX.log)
"$BUILD_DIR/server/conveyord" --config config/demo.yaml --tcp none >"$LOG" 2>&1 &
DAEMON=$!
trap 'kill -TERM $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null || true' EXIT
# Wait for the health check to say SERVING (no fixed sleep).
for _ in $(seq 1 200); do
  if "$BUILD_DIR/server/conveyord" --probe "unix://$SOCKET" >/dev/null 2>&1; then break; fi
  if ! kill -0 $DAEMON 2>/dev/null; then cat "$LOG"; exit 1; fi
  sleep 0.1
done
echo "conveyord is serving on unix://$SOCKET (log: $LOG)"
PYTHONPATH="$ROOT/client/python" "$PY" client/python/examples/stream_epoch.py \
  --server "unix://$SOCKET" --pipeline demo-train --batch-size 64 --epochs "$EPOCHS"
PYTHONPATH="$ROOT/client/python" "$PY" -m conveyor stats --server "unix://$SOCKET"
