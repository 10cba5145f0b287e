#!/usr/bin/env bash
# Formats the project's C++ (and CUDA) sources with clang-format and the
# tree's .clang-format.
#
#   scripts/format.sh           rewrite every tracked source in place
#   scripts/format.sh --check   list the files that are not formatted; exit 1 if any
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CLANG_FORMAT="${CLANG_FORMAT:-clang-format}"
if ! command -v "$CLANG_FORMAT" >/dev/null 2>&1; then
  echo "format.sh: $CLANG_FORMAT not found (scripts/install-deps.sh installs it)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = "--check" ]; then
  bad=0
  for f in "${files[@]}"; do
    if ! "$CLANG_FORMAT" --dry-run --Werror "$f" >/dev/null 2>&1; then
      echo "not formatted: $f (scripts/format.sh rewrites it)"
      bad=1
    fi
  done
  [ "$bad" -eq 0 ] && echo "format.sh: ${#files[@]} files formatted"
  exit "$bad"
fi
"$CLANG_FORMAT" -i "${files[@]}"
