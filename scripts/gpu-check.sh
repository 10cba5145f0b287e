#!/usr/bin/env bash
# The GPU checks, one command on the GPU host, from the unpacked bundle (scripts/gpu-bundle.sh):
#
#   ./gpu-check.sh [RESULTS_DIR]            in the unpacked bundle (it is copied there)
#   scripts/gpu-check.sh BUNDLE.tar.gz [RESULTS_DIR]   unpacks it to a temporary folder first
#
# Needs no network and no system package: bash, coreutils, the NVIDIA driver (nvidia-smi) and
# a Python ($PYTHON, default python3; 3.12 with torch, CuPy, JAX, grpcio, protobuf, numpy).
# Pillow and pytest come from the bundle's python-fallback/ when that Python lacks them.
# Runs, each under its own time limit (under 5 minutes in all on one H200, 16 cores):
#   bundle      every file against SHA256SUMS; glibc new enough for the bundle's conveyord
#   gpu         nvidia-smi -L, torch sees a CUDA device
#   data        two generated ImageFolders (64 images for the tests, $GPU_CHECK_IMAGES, default
#               2048, for the benchmark)
#   smoke       tests/gpu/host_smoke.py: the bundle's conveyord serves the bundle's client
#   pytest      tests/gpu (pinned, device=cuda:0, DEVICE_MEMORY with a second process, kill -9,
#               byte-identical to the host path, torch/CuPy/JAX views), one summary line each
#   bench       bench/gpu_landing.py (host->device GB/s, images/s landed, CPU-ms per image)
# Everything goes to RESULTS_DIR (default: results/<UTC time> in the bundle) and, when $OUT is
# set, to $OUT/gpu-check as well: summary.txt (one line per check: "CHECK name: PASS|FAIL|SKIP
# detail"), the logs, pytest's junit XML, the benchmark's JSON, nvidia-smi and versions.
# Exit status: 0 when no check failed (skips are not failures but are listed as such).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/bin/conveyord" ] && [ -f "$here/MANIFEST.json" ]; then
  BUNDLE="$here"
elif [ -n "${1:-}" ] && [ -f "$1" ]; then
  unpack="$(mktemp -d /tmp/gpu-bundle.XXXXXX)"
  tar xf "$1" -C "$unpack" || { echo "gpu-check.sh: cannot unpack $1" >&2; exit 2; }
  shift
  BUNDLE="$(dirname "$(ls -d "$unpack"/*/MANIFEST.json | head -n1)")"
else
  echo "usage: ./gpu-check.sh [RESULTS_DIR] (in an unpacked bundle) or gpu-check.sh BUNDLE.tar.gz [RESULTS_DIR]" >&2
  exit 2
fi
PY="${PYTHON:-python3}"
RESULTS="${1:-$BUNDLE/results/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$RESULTS"
RESULTS="$(cd "$RESULTS" && pwd)"
SUMMARY="$RESULTS/summary.txt"
: >"$SUMMARY"
failed=0
say() { echo "CHECK $1: $2${3:+ $3}" | tee -a "$SUMMARY"; [ "$2" = FAIL ] && failed=1; return 0; }
publish() {
  if [ -n "${OUT:-}" ]; then mkdir -p "$OUT/gpu-check" && cp -r "$RESULTS"/. "$OUT/gpu-check/"; fi
}
trap publish EXIT
echo "gpu-check.sh: bundle $BUNDLE, results $RESULTS" | tee "$RESULTS/run.txt"
cp "$BUNDLE/MANIFEST.json" "$RESULTS/"

# --- bundle --------------------------------------------------------------------------------
if (cd "$BUNDLE" && sha256sum --quiet -c SHA256SUMS) >"$RESULTS/sha256.txt" 2>&1; then
  say bundle.checksums PASS "$(wc -l <"$BUNDLE/SHA256SUMS") files"
else
  say bundle.checksums FAIL "see sha256.txt"
fi
need="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["glibc_needed"])' "$BUNDLE/MANIFEST.json")"
have="$("$PY" -c 'import platform; print(platform.libc_ver()[1])')"
if "$PY" -c 'import sys; n=[int(x) for x in sys.argv[1].split("_")[1].split(".")]; h=[int(x) for x in sys.argv[2].split(".")]; sys.exit(0 if h>=n else 1)' "$need" "$have"; then
  say bundle.glibc PASS "host glibc $have, bundle needs $need"
else
  say bundle.glibc FAIL "host glibc $have is older than $need that the bundle's conveyord needs"
fi

# --- Python environment ----------------------------------------------------------------------
pypath="$BUNDLE/python"
for module in PIL pytest; do
  if ! "$PY" -c "import $module" 2>/dev/null && [ -d "$BUNDLE/python-fallback/$module" ]; then
    pypath="$pypath:$BUNDLE/python-fallback/$module"
    echo "gpu-check.sh: $module from the bundle's python-fallback/" | tee -a "$RESULTS/run.txt"
  fi
done
export PYTHONPATH="$pypath${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
export CONVEYORD="$BUNDLE/bin/conveyord"
"$PY" - >"$RESULTS/versions.txt" 2>&1 <<'EOF'
import importlib, platform, sys
print("python", sys.version.split()[0], platform.platform())
for m in ("torch", "cupy", "jax", "jaxlib", "grpc", "google.protobuf", "numpy", "PIL", "pytest",
          "torchvision"):
    try:
        mod = importlib.import_module(m)
        print(m, getattr(mod, "__version__", "?"), getattr(mod, "__file__", ""))
    except Exception as e:  # noqa: BLE001
        print(m, "missing:", type(e).__name__, e)
try:
    import torch
    print("torch.cuda", torch.version.cuda, "available", torch.cuda.is_available(),
          "devices", torch.cuda.device_count())
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        print("cuda:%d" % i, p.name, "GPU-%s" % p.uuid, p.total_memory)
except Exception as e:  # noqa: BLE001
    print("torch.cuda error:", e)
EOF
cat "$RESULTS/versions.txt"

# --- gpu -----------------------------------------------------------------------------------------
if timeout 60 nvidia-smi -L >"$RESULTS/nvidia-smi-L.txt" 2>&1; then
  say gpu.nvidia_smi PASS "$(head -n1 "$RESULTS/nvidia-smi-L.txt")"
  timeout 60 nvidia-smi >"$RESULTS/nvidia-smi.txt" 2>&1
else
  say gpu.nvidia_smi FAIL "$(tail -n1 "$RESULTS/nvidia-smi-L.txt")"
fi
cat "$RESULTS/nvidia-smi-L.txt"
if grep -q "available True" "$RESULTS/versions.txt"; then
  say gpu.torch_cuda PASS "$(grep '^cuda:0' "$RESULTS/versions.txt")"
else
  say gpu.torch_cuda FAIL "torch sees no CUDA device (versions.txt)"
fi

# --- data ------------------------------------------------------------------------------------------
DATA="$(mktemp -d /tmp/gpu-check-data.XXXXXX)"
workers="$(nproc)"
gen() {  # OUT IMAGES CLASSES
  timeout 240 "$PY" "$BUNDLE/bench/gen_imagenet_like.py" --out "$1" --images "$2" --classes "$3" \
    --workers "$workers" >>"$RESULTS/data.log" 2>&1
}
if gen "$DATA/small" 64 4 && gen "$DATA/bench" "${GPU_CHECK_IMAGES:-2048}" 100; then
  say data PASS "$(tail -n1 "$RESULTS/data.log")"
else
  say data FAIL "see data.log"
fi

# --- smoke -----------------------------------------------------------------------------------------
if timeout 120 "$PY" "$BUNDLE/tests/gpu/host_smoke.py" --data "$DATA/small" >"$RESULTS/smoke.log" 2>&1; then
  say smoke PASS "$(tail -n1 "$RESULTS/smoke.log")"
else
  say smoke FAIL "$(tail -n1 "$RESULTS/smoke.log")"
fi
timeout 30 "$BUNDLE/bin/conveyord" --version >>"$RESULTS/smoke.log" 2>&1

# --- pytest ----------------------------------------------------------------------------------------
export CONVEYOR_GPU_DATA="$DATA/small"
(cd "$BUNDLE/tests/gpu" && PYTHONPATH="$BUNDLE/tests/support:$PYTHONPATH" timeout 200 "$PY" -m pytest \
  -p no:cacheprovider -p skipped_exit -rA -v --junitxml="$RESULTS/pytest.xml" . \
  >"$RESULTS/pytest.log" 2>&1)
rc=$?
"$PY" - "$RESULTS/pytest.xml" >>"$SUMMARY.tmp" 2>/dev/null <<'EOF'
import sys
import xml.etree.ElementTree as ET
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    module = case.get("classname", "").split(".")[-1]
    name = "pytest.%s::%s" % (module, case.get("name")) if module else "pytest." + case.get("name")
    outcome, detail = "PASS", "%ss" % case.get("time", "?")
    for tag, word in (("failure", "FAIL"), ("error", "FAIL"), ("skipped", "SKIP")):
        el = case.find(tag)
        if el is not None:
            outcome = word
            detail = (el.get("message") or "").splitlines()[0][:200] if el.get("message") else tag
    print("CHECK %s: %s %s" % (name, outcome, detail))
EOF
if [ -s "$SUMMARY.tmp" ]; then
  cat "$SUMMARY.tmp" | tee -a "$SUMMARY"
  grep -q ': FAIL' "$SUMMARY.tmp" && failed=1
fi
rm -f "$SUMMARY.tmp"
case "$rc" in
  0) say pytest PASS "tests/gpu (pytest.log)" ;;
  77) say pytest SKIP "every GPU test skipped (pytest.log)"; failed=1 ;;
  124) say pytest FAIL "timed out after 200 s (pytest.log)" ;;
  *) say pytest FAIL "exit $rc (pytest.log)" ;;
esac

# --- bench -----------------------------------------------------------------------------------------
if timeout 240 "$PY" "$BUNDLE/bench/gpu_landing.py" --data "$DATA/bench" --conveyord "$CONVEYORD" \
  --json "$RESULTS/gpu_landing.json" >"$RESULTS/bench.log" 2>&1; then
  if grep -q '^skipped: no CUDA device' "$RESULTS/bench.log"; then
    say bench SKIP "$(head -n1 "$RESULTS/bench.log")"
  else
    say bench PASS "$(grep -E '^ratio' "$RESULTS/bench.log" | tr '\n' ';' | cut -c1-400)"
  fi
else
  say bench FAIL "exit $? (bench.log)"
fi
cat "$RESULTS/bench.log"

rm -rf "$DATA"
echo "gpu-check.sh: summary ($SUMMARY):"
cat "$SUMMARY"
exit "$failed"
