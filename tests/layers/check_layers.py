#!/usr/bin/env python3
"""The library's layer order, checked: a file of one layer may include headers of its own layer and of
the layers below it, never of a layer above (docs/architecture.md draws the picture). A layer is the
folder a file sits in: include/mantissa/<layer>/ or src/<layer>/ (src/backend/* is the backend layer).

KNOWN lists inclusions allowed to break the order (none: issue 12 removed the last); the check fails on any
other upward inclusion, and on a KNOWN one that is gone.

  python3 tests/layers/check_layers.py [SOURCE_DIR]
"""
import os
import re
import sys

# Lowest first.
ORDER = ["base", "numeric", "core", "backend", "autograd", "ops", "optim", "amp", "nn", "data", "io", "dist", "train"]

KNOWN: set = set()

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(rel):
    parts = rel.split("/")
    if parts[0] == "include" and len(parts) > 3:
        return parts[2]
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    return None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    found, problems = set(), []
    for top in ("include/mantissa", "src"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                mine = layer_of(rel)
                if mine not in ORDER:
                    if mine is not None:
                        problems.append(f"{rel}: folder '{mine}' is in no layer (add it to ORDER)")
                    continue
                with open(path, encoding="utf-8") as f:
                    for line in f:
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        if inc.startswith("mantissa/"):
                            theirs = inc.split("/")[1]
                        else:
                            theirs = layer_of(os.path.relpath(os.path.normpath(os.path.join(dirpath, inc)), root))
                        if theirs not in ORDER or ORDER.index(theirs) <= ORDER.index(mine):
                            continue
                        edge = f"{rel} -> {inc}"
                        found.add(edge)
                        if edge not in KNOWN:
                            problems.append(f"{edge}: the {mine} layer includes the {theirs} layer above it")
    for edge in sorted(KNOWN - found):
        problems.append(f"{edge}: fixed; remove it from KNOWN in tests/layers/check_layers.py")
    for p in problems:
        print(p)
    print(f"layer order {' < '.join(ORDER)}: {len(found & KNOWN)} known upward inclusions left, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
