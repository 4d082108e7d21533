"""Builds the apf wheel with libapf.so inside it.

The metadata is in pyproject.toml; this file only adds the native library:
build_py runs the repository's release build (scripts/build-release.sh: the
SONAME'd, stripped libapf.so without test hooks) and copies the library into
the package, and the wheel is tagged py3-none-PLATFORM: any Python 3 (the
package is ctypes only), this platform (it carries native code). No sdist is
offered (see NoSdist). APF_WHEEL_LIBRARY=/path/to/libapf.so bundles a prebuilt one
instead (no cargo needed).
"""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def _libapf() -> Path:
    prebuilt = os.environ.get("APF_WHEEL_LIBRARY")
    if prebuilt:
        return Path(prebuilt)
    out = subprocess.run(
        ["bash", str(REPO / "scripts" / "build-release.sh")],
        check=True, stdout=subprocess.PIPE, text=True,
    ).stdout.strip()
    return Path(out) / "libapf.so"


class BuildWithLibapf(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "apf" / "libapf.so"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_libapf(), target)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


class AnyPython3Wheel(bdist_wheel):
    """The package is ctypes only: no CPython extension, no Python ABI in
    libapf.so (which needs only libc). So one wheel fits every Python 3 on
    its platform: py3-none-PLATFORM (auditwheel repair then gives the
    manylinux platform tag)."""

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


class NoSdist(sdist):
    """No sdist is offered: libapf.so is built from the Rust crate at the
    repository's root, which an sdist of this directory cannot carry, so an
    unpacked sdist could not build. Wheels are built from a checkout."""

    def run(self):
        raise SystemExit(
            "apf is not offered as an sdist (the wheel bundles libapf.so, built from the "
            "Rust crate at the repository root): build the wheel from a checkout with "
            "`python -m build --wheel bindings/python` or `pip wheel bindings/python`"
        )


setup(
    cmdclass={"build_py": BuildWithLibapf, "bdist_wheel": AnyPython3Wheel, "sdist": NoSdist},
    distclass=BinaryDistribution,
)
