#!/usr/bin/env bash
# Builds libapf, installs the test requirements if missing, and runs the
# Python binding's tests. Usage: bindings/python/run-tests.sh [pytest args]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-python3}"

if [[ -z "${APF_LIBRARY:-}" ]]; then
    (cd "$repo" && cargo build --release -p libapf --features test-hooks)
    export APF_LIBRARY="$repo/target/release/libapf.so"
fi

# Idempotent: pip only downloads what is missing or at another version.
if ! "$python" - "$here/requirements-test.txt" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if line:
        name, _, want = line.partition("==")
        if version(name) != want:
            sys.exit(1)
PY
then
    "$python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements-test.txt"
fi

cd "$here"
exec "$python" -m pytest -q -p no:cacheprovider tests "$@"
