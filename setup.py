"""`pip install .`: the extension mantissa._mantissa is CMake's target mantissa_python (python/CMakeLists.txt),
built against the same library as the command, and packed with the package's Python files.

Where it builds: MANTISSA_BUILD_DIR, a configured build tree to reuse (`make build`'s build/: nothing is
compiled twice), or else build-python/, configured here for this Python with the library alone (no tests,
benchmarks or fuzzers). MANTISSA_SKIP_BUILD=1 packs the extension as it is in the tree, building nothing:
the test suite installs what it is testing, and never builds in the tree its other cases run from.
"""
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
OWN_BUILD = ROOT / "build-python"


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = Path(os.environ.get("MANTISSA_BUILD_DIR") or OWN_BUILD).resolve()
        if not (build_dir / "CMakeCache.txt").exists():
            subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                            f"-DPython3_EXECUTABLE={sys.executable}", "-DMANTISSA_BUILD_TESTS=OFF",
                            "-DMANTISSA_BUILD_BENCHMARKS=OFF", "-DMANTISSA_BUILD_FUZZERS=OFF"], check=True)
        if not os.environ.get("MANTISSA_SKIP_BUILD"):  # (the test suite's: it installs what it is testing, as built)
            subprocess.run(["cmake", "--build", str(build_dir), "--target", "mantissa_python", "-j", str(os.cpu_count() or 1)],
                           check=True)
        built = build_dir / "python" / "mantissa" / ("_mantissa" + sysconfig.get_config_var("EXT_SUFFIX"))
        if not built.exists():
            sys.exit(f"mantissa: {built} was not built: {build_dir} is configured for another Python than "
                     f"{sys.executable}; leave MANTISSA_BUILD_DIR unset (build-python/) or reconfigure it with "
                     f"-DPython3_EXECUTABLE={sys.executable}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, target)


# setuptools' own scratch space goes under build-python/, not into CMake's build/ or the source tree.
OWN_BUILD.mkdir(exist_ok=True)
setup(
    packages=["mantissa"],
    package_dir={"": "python"},
    ext_modules=[Extension("mantissa._mantissa", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": str(OWN_BUILD / "setuptools")}, "egg_info": {"egg_base": str(OWN_BUILD)}},
)
