#!/usr/bin/env python3
"""How many files a new recipe, a new op and a new device touch, counted from the tree as it is: the
files that spell an existing one of each kind, which a new one of that kind would be spelled in too
(docs/architecture.md quotes the output). The representatives:

  recipe  mxfp4, a microscaled recipe with no code of its own (a row of the recipe table)
  op      HadamardRows, a kernel with a reference, a CPU and a GPU implementation
  device  cuda, the second device (what spells it outside its own folder, src/backend/cuda/)

Product code is src/, include/, tools/ and python/ (not its tests); tests and docs are counted apart.
A name in a comment is not counted (an example, not a place a new one must be added).

  python3 scripts/files_touched.py
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRODUCT = ("src/", "include/", "tools/", "python/src/", "python/mantissa/")
TESTS = ("tests/", "python/tests/", "fuzz/")
KINDS = [
    ("recipe", r"\bmxfp4\b", None),
    ("op", r"\bHadamardRows\b", None),
    ("device", r"\bcuda\b|\bCUDA\b|\bDevice::cuda\b", "src/backend/cuda/"),
]


# C++ line comments and Python/shell/CMake ones (a line's rest after "//" or a leading "#").
COMMENT = re.compile(r"//[^\n]*|^\s*#(?!include|pragma|define|if|endif|else)[^\n]*", re.MULTILINE)


def tracked_files():
    out = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if f.endswith((".h", ".cpp", ".cu", ".cuh", ".py", ".md", ".txt", ".cmake", ".sh"))]


def spelled_in(pattern, files, own_folder):
    rx = re.compile(pattern)
    hits = []
    for f in files:
        if own_folder and f.startswith(own_folder):
            continue
        try:
            with open(os.path.join(ROOT, f), encoding="utf-8", errors="replace") as text:
                code = text.read()
        except OSError:
            continue
        if not f.endswith(".md"):
            code = COMMENT.sub("", code)  # a name in a comment is an example, not a place to change
        if rx.search(code):
            hits.append(f)
    return hits


def main():
    files = tracked_files()
    verbose = "-v" in sys.argv
    for kind, pattern, own in KINDS:
        hits = spelled_in(pattern, files, own)
        product = [f for f in hits if f.startswith(PRODUCT) and not f.startswith("python/tests/")]
        tests = [f for f in hits if f.startswith(TESTS)]
        docs = [f for f in hits if f.endswith(".md")]
        where = f" (outside {own})" if own else ""
        print(f"{kind:<7} product files {len(product):>3}, test files {len(tests):>3}, docs {len(docs):>3}{where}")
        if verbose or len(product) <= 12:
            for f in product:
                print(f"        {f}")


if __name__ == "__main__":
    main()
