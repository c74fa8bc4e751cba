"""Builds the package's native parts with CMake: the `hbmalloc` tool (hbmalloc/bin) and the plug-ins
libhbmalloc_torch.so and libhbmalloc_torch_npu.so (hbmalloc/lib), loaded by hbmalloc.torch through ctypes, so the
wheel holds no Python extension: its tag is py3-none-<platform>.

When the building Python can import torch (pip install --no-build-isolation on a machine with torch), the plug-ins
are also built against that torch, and must be (libhbmalloc_torch_c10.so: out of memory raises
torch.OutOfMemoryError, which torch's cuDNN paths catch to fall back to another algorithm or a smaller workspace);
they fit that torch only and use() checks it. HBMALLOC_TORCH_C10=OFF leaves them out (a wheel for an index), ON
requires them; the default, AUTO, is ON when torch imports and OFF otherwise. HBMALLOC_CMAKE_ARGS adds CMake arguments; CMAKE_BUILD_PARALLEL_LEVEL the jobs."""
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:
    try:  # setuptools 70.1 and later have their own
        from setuptools.command.bdist_wheel import bdist_wheel
    except ImportError:  # building an sdist only
        bdist_wheel = None

HERE = os.path.dirname(os.path.abspath(__file__))


def header_version():
    text = open(os.path.join(HERE, "include", "hbmalloc.h")).read()
    m = re.search(r'#define HBM_VERSION_STRING "([^"]+)"', text)
    if not m:
        sys.exit("setup.py: no HBM_VERSION_STRING in include/hbmalloc.h")
    py = re.search(r'__version__ = "([^"]+)"', open(os.path.join(HERE, "python", "hbmalloc", "__init__.py")).read())
    if not py or py.group(1) != m.group(1):
        sys.exit("setup.py: python/hbmalloc/__init__.py's __version__ (%s) is not include/hbmalloc.h's %s"
                 % (py.group(1) if py else "missing", m.group(1)))
    return m.group(1)


class build_native(build_py):
    """build_py, then CMake: the tool and the plug-ins copied into the package under build_lib."""

    def run(self):
        super().run()
        c10 = os.environ.get("HBMALLOC_TORCH_C10", "AUTO").upper()
        if c10 not in ("AUTO", "ON", "OFF"):
            sys.exit("setup.py: HBMALLOC_TORCH_C10 must be AUTO, ON or OFF, not %r" % c10)
        if c10 == "AUTO":  # a torch here: the package must carry the build for it (typed out-of-memory errors)
            c10 = "ON" if subprocess.call([sys.executable, "-c", "import torch"], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL) == 0 else "OFF"
        tmp = os.path.join(os.path.abspath(self.build_lib), "..", "cmake-hbmalloc")
        cfg = ["cmake", "-S", HERE, "-B", tmp, "-DCMAKE_BUILD_TYPE=Release", "-DHBM_TESTS=OFF", "-DHBM_BENCH=OFF",
               "-DHBM_PYTHON=" + sys.executable, "-DHBM_TORCH_C10=" + c10]
        cfg += shlex.split(os.environ.get("HBMALLOC_CMAKE_ARGS", ""))
        if shutil.which("cmake") is None:
            sys.exit("setup.py: cmake is needed to build hbmalloc (Debian: apt install cmake gcc g++)")
        if subprocess.call(cfg) != 0:
            sys.exit("setup.py: configuring failed%s" % (
                "; torch imports here, so the plug-ins are built against it: its headers and libc10 must be found "
                "(HBMALLOC_TORCH_C10=OFF builds the generic plug-ins only: out of memory is then a RuntimeError)"
                if c10 == "ON" else ""))
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", tmp, "-j", jobs])
        pkg = os.path.join(self.build_lib, "hbmalloc")
        os.makedirs(os.path.join(pkg, "bin"), exist_ok=True)
        os.makedirs(os.path.join(pkg, "lib"), exist_ok=True)
        shutil.copy2(os.path.join(tmp, "hbmalloc"), os.path.join(pkg, "bin", "hbmalloc"))
        for name in ("libhbmalloc_torch.so", "libhbmalloc_torch_npu.so", "libhbmalloc_torch_c10.so",
                     "libhbmalloc_torch_npu_c10.so"):
            src = os.path.join(tmp, name)
            if os.path.exists(src):
                shutil.copy2(src, os.path.join(pkg, "lib", name))
            elif "c10" not in name or c10 == "ON":
                sys.exit("setup.py: the CMake build made no %s" % name)
        # Prometheus's configuration and rules, and the Grafana dashboard (docs/MONITOR.md): hbmalloc/monitor.
        shutil.copytree(os.path.join(HERE, "monitor"), os.path.join(pkg, "monitor"), dirs_exist_ok=True)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True  # native files inside: a platform wheel, installed to platlib


# A wheel (pip: bdist_wheel, and dist_info for its metadata) without the `wheel` package: setuptools would stop with
# "error: invalid command 'bdist_wheel'", which names neither the Python nor the cause.
if bdist_wheel is None and {"bdist_wheel", "dist_info"} & set(sys.argv[1:]):
    sys.exit("setup.py: the Python building this (%s) has no `wheel` package, so setuptools cannot build a wheel "
             "(\"invalid command 'bdist_wheel'\"). On Debian 12, offline, it comes from Debian's python3-wheel, which "
             "a venv sees through --system-site-packages only when Debian's python3 made it: a python3 that is not "
             "the system's (pyenv, conda, one built by hand) has site packages of its own, without it. Make the venv "
             "with /usr/bin/python3 -m venv --system-site-packages, or install wheel into this Python; with network "
             "access `pip install .` (without --no-build-isolation) fetches it."
             % " -> ".join(dict.fromkeys([sys.executable, os.path.realpath(sys.executable)])))

cmds = {"build_py": build_native}
if bdist_wheel is not None:
    class bdist_wheel_native(bdist_wheel):
        """No CPython extension inside (ctypes loads the plug-ins): any Python 3, this platform."""

        def get_tag(self):
            return ("py3", "none", super().get_tag()[2])

    cmds["bdist_wheel"] = bdist_wheel_native

# Not build/: that is the CMake build folder of the README's commands.
setup(version=header_version(), cmdclass=cmds, distclass=BinaryDistribution,
      options={"build": {"build_base": "build-pip"}})
