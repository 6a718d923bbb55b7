# The native part of `pip install .` (pyproject.toml): CMake builds the `_meshsim` module, the
# same target as a developer build (python/CMakeLists.txt), and setuptools packages it with
# python/meshsim/. MESHSIM_BUILD_DIR names an existing CMake build to reuse (configured for the
# same Python); without it a Release build is configured under setuptools' build directory.
import os
import re
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build import build
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    found = re.search(r"project\(\s*meshsim\s+VERSION\s+([0-9.]+)", text)
    if not found:
        sys.exit("setup.py: no 'project(meshsim VERSION x.y.z' in CMakeLists.txt")
    return found.group(1)


class BuildUnderBuild(build):
    # setuptools' files under build/setuptools, beside CMake's, not in a second top-level folder.
    def initialize_options(self):
        super().initialize_options()
        self.build_base = str(ROOT / "build" / "setuptools")


class CMakeModule(build_ext):
    def build_extension(self, ext):
        cmake_dir = Path(os.environ.get("MESHSIM_BUILD_DIR") or Path(self.build_temp).resolve() / "cmake")
        if not (cmake_dir / "CMakeCache.txt").exists():
            subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(cmake_dir), "-DCMAKE_BUILD_TYPE=Release",
                                   "-DMESHSIM_BUILD_TESTS=OFF", "-DMESHSIM_BUILD_BENCH=OFF",
                                   f"-DPython3_EXECUTABLE={sys.executable}"])
        subprocess.check_call(["cmake", "--build", str(cmake_dir), "--target", "_meshsim", "--parallel",
                               str(os.cpu_count() or 2)])
        want = Path(self.get_ext_fullpath(ext.name)).name  # _meshsim + this Python's ABI suffix
        built = cmake_dir / "python" / "meshsim" / want
        if not built.exists():
            found = sorted(p.name for p in (cmake_dir / "python" / "meshsim").glob("_meshsim*"))
            sys.exit(f"setup.py: {built} was not built (found: {found or 'nothing'}); the CMake build in "
                     f"{cmake_dir} is for another Python or lacks pybind11-dev/python3-dev "
                     f"(tools/install-deps.sh); unset MESHSIM_BUILD_DIR or point it at a build for {sys.executable}")
        dest = Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        self.copy_file(str(built), str(dest))


setup(version=project_version(),
      ext_modules=[Extension("meshsim._meshsim", sources=[])],
      cmdclass={"build": BuildUnderBuild, "build_ext": CMakeModule})
