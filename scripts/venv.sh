#!/usr/bin/env bash
# Creates (once) and prints the interpreter of a cached Python virtual
# environment for what only PyPI has (framework adapters, peer loaders,
# validators). Usage: scripts/venv.sh NAME
#
# scripts/venvs/NAME.txt lists the pinned requirements (pip's format). A
# first line "# system-site-packages" makes the environment see Debian's
# python3-* packages (grpcio, protobuf, numpy, torch) beside its own.
# Environments live in $CONVEYOR_VENV_DIR (default: .venvs/ of the source
# tree, git-ignored), one folder per NAME, and are rebuilt only when the
# requirements file changes (its sha256 is stamped inside). Prints the path
# of the environment's python on stdout; pip's output goes to stderr.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="${1:?usage: scripts/venv.sh NAME (a file scripts/venvs/NAME.txt)}"
req="$ROOT/scripts/venvs/$name.txt"
if [ ! -f "$req" ]; then
  echo "venv.sh: no requirements file $req" >&2
  exit 2
fi
base="${CONVEYOR_VENV_DIR:-$ROOT/.venvs}"
dir="$base/$name"
stamp="$(sha256sum "$req" | cut -d' ' -f1)"
if [ -x "$dir/bin/python" ] && [ "$(cat "$dir/.conveyor-stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "$dir/bin/python"
  exit 0
fi
flags=()
if head -n1 "$req" | grep -q '^# system-site-packages'; then flags+=(--system-site-packages); fi
rm -rf "$dir"
mkdir -p "$base"
echo "venv.sh: creating $dir from $req" >&2
/usr/bin/python3 -m venv "${flags[@]}" "$dir" >&2
"$dir/bin/python" -m pip install -q --disable-pip-version-check --no-input -r "$req" >&2
echo "$stamp" >"$dir/.conveyor-stamp"
echo "$dir/bin/python"
