"""`pip install .` as a user runs it, into a fresh virtual environment: the package lands in its
site-packages with the extension, imports from anywhere, and says the version CMake's project says. The
extension is packed from the build tree the suite runs from (MANTISSA_BUILD_DIR, MANTISSA_SKIP_BUILD): nothing
is compiled twice, nor built under the feet of the cases running beside it."""
import os
import re
import subprocess
import sys
import venv

import pytest

from conftest import SOURCE_DIR


def test_pip_install_puts_a_working_package_in_a_virtual_environment(tmp_path):
    build_dir = os.environ.get("MANTISSA_BUILD_DIR")
    if not build_dir:
        pytest.fail("MANTISSA_BUILD_DIR: the configured build tree to install from (ctest sets it)")
    venv.create(tmp_path / "venv", system_site_packages=True, with_pip=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    env = {**os.environ, "MANTISSA_BUILD_DIR": build_dir, "MANTISSA_SKIP_BUILD": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "--no-index", str(SOURCE_DIR)],
                   check=True, env=env, cwd=tmp_path)
    script = ("import mantissa, numpy, importlib.metadata as m; "
              "print(mantissa.__file__); print(mantissa.__version__, m.version('mantissa')); "
              "print(mantissa.encode(numpy.float32([1.5, -2.0]), 'e4m3').tolist())")
    out = subprocess.run([python, "-c", script], check=True, env=env, cwd=tmp_path, capture_output=True, text=True).stdout.split("\n")
    assert out[0].startswith(str(tmp_path / "venv")), out[0]
    cmake_version = re.search(r"project\(mantissa VERSION ([0-9.]+)", (SOURCE_DIR / "CMakeLists.txt").read_text()).group(1)
    assert out[1] == f"{cmake_version} {cmake_version}"
    assert out[2] == "[60, 192]"  # 1.5 = 0 0111 100, -2.0 = 1 1000 000
