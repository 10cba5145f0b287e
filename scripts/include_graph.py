#!/usr/bin/env python3
"""Prints the include graph of Conveyor's C++ folders and checks its layers.

    scripts/include_graph.py            # the graph: FOLDER -> FOLDER (includes)
    scripts/include_graph.py --check    # the same, exit 1 on an include that
                                        # runs against the layers below

Each folder of core/, remote/ and server/ has a layer. A file may include
headers of its own folder and of folders in lower layers; folders in one
layer know nothing of each other (core/data and core/decode, for one). The
link enforces the same thing (one static library per folder), so a back-edge
shows here first, with the file and line. core/decode/ffmpeg/ counts as
core/decode. tests/, bench/ and client/ may include anything.
"""
import argparse
import collections
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Layers, lowest first.
LAYERS = [
    ["core/base"],
    ["core/data", "core/decode", "core/gpu"],
    ["core/engine"],
    ["remote", "server/ops", "server/access"],
    ["server/transport"],
    ["server/transport/device"],
    ["server/service"],
    ["server/config"],
    ["server"],
]
RANK = {folder: i for i, layer in enumerate(LAYERS) for folder in layer}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of(path):
    """The layered folder `path` (relative to the root) belongs to, or None."""
    d = os.path.dirname(path)
    while d:
        if d in RANK:
            return d
        d = os.path.dirname(d)
    return None


def sources():
    for top in ("core", "remote", "server"):
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            for name in sorted(names):
                if name.endswith((".h", ".cc", ".cu", ".cuh")):
                    yield os.path.relpath(os.path.join(dirpath, name), ROOT)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 on an include against the layers")
    args = ap.parse_args()

    edges = collections.Counter()
    bad = []
    for path in sources():
        src = folder_of(path)
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                dst = folder_of(m.group(1))
                if dst is None or src is None:
                    continue
                if dst != src:
                    edges[(src, dst)] += 1
                    if RANK[dst] >= RANK[src]:
                        bad.append(f"{path}:{lineno}: {src} includes {m.group(1)} ({dst} is not below it)")

    for layer in LAYERS:
        for src in layer:
            outs = sorted((dst for (s, dst) in edges if s == src), key=lambda d: (RANK[d], d))
            shown = ", ".join(f"{d} ({edges[(src, d)]})" for d in outs) or "-"
            print(f"{src:18} -> {shown}")
    if bad:
        print("\ninclude graph: includes against the layers:", file=sys.stderr)
        for b in bad:
            print("  " + b, file=sys.stderr)
        if args.check:
            return 1
    elif args.check:
        print("\ninclude graph: every include runs down the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
