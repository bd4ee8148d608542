"""Shared by the pytest suite: where the `mantissa` command and the source tree are (ctest passes them; a
pip-installed package finds the command on PATH), and a reader of safetensors files (the format is a
length, a JSON header and raw little-endian data, so the tests read it without PyPI's package)."""
import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

SOURCE_DIR = Path(os.environ.get("MANTISSA_SOURCE_DIR", Path(__file__).resolve().parents[2]))


def seeded_rng():
    """The tests' random generator: from a fixed seed, so that a commit's tests give the same result on
    every run; MANTISSA_TEST_SEED=N replays another seed, =random draws a fresh one (as the C++ tests)."""
    seed = os.environ.get("MANTISSA_TEST_SEED", "")
    return np.random.default_rng(None if seed == "random" else int(seed) if seed else 20261205)


@pytest.fixture(scope="session")
def cli():
    """The `mantissa` command's path."""
    path = os.environ.get("MANTISSA_CLI") or shutil.which("mantissa")
    if not path:
        pytest.fail("the mantissa command is needed: set MANTISSA_CLI or put it on PATH")
    return path


_DTYPES = {"F32": np.float32, "U8": np.uint8, "BF16": np.uint16, "F16": np.float16, "I64": np.int64,
           "F8_E4M3": np.uint8, "F8_E5M2": np.uint8, "F8_E8M0": np.uint8, "F4": np.uint8}


def read_safetensors(path):
    """name -> NumPy array (bf16 as its uint16 bits, FP8 and E8M0 as their bytes, F4 as its packed bytes,
    [..., n / 2] for a shape of [..., n] values), and the metadata."""
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    out = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=_DTYPES[entry["dtype"]])
        shape = list(entry["shape"])
        if entry["dtype"] == "F4":
            shape[-1] //= 2
        out[name] = array.reshape(shape)
    return out, metadata
