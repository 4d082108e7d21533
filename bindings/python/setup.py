"""Builds the apf wheel with libapf.so inside it.

The metadata is in pyproject.toml; this file only adds the native library:
build_py runs the repository's release build (scripts/build-release.sh: the
SONAME'd, stripped libapf.so without test hooks) and copies the library into
the package, and the wheel is tagged for this platform since it carries
native code. APF_WHEEL_LIBRARY=/path/to/libapf.so bundles a prebuilt one
instead (no cargo needed).
"""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

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


setup(cmdclass={"build_py": BuildWithLibapf}, distclass=BinaryDistribution)
