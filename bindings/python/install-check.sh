#!/usr/bin/env bash
# The Python part of scripts/install-checks.sh: builds the wheel (which runs
# the release build and bundles libapf.so), installs it into a fresh venv in
# WORKDIR and runs tools/install_check.py there, outside the repository,
# with no APF_LIBRARY.
#   bindings/python/install-check.sh WORKDIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="$1"
python="${PYTHON:-python3}"
mkdir -p "$work/dist"
"$python" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$work/dist" "$here"
wheel="$(ls "$work"/dist/apf-*.whl)"
"$python" - "$wheel" <<'PY' || { echo "the wheel has no apf/libapf.so or apf/py.typed" >&2; exit 1; }
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
sys.exit(0 if {"apf/libapf.so", "apf/py.typed"} <= names else 1)
PY
"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check --no-index "$wheel"
cp "$here/tools/install_check.py" "$work/check.py"
(cd "$work" && env -u APF_LIBRARY "$work/venv/bin/python" check.py)
