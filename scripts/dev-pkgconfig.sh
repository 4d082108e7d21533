#!/usr/bin/env bash
# Writes target/pkgconfig/apf.pc describing the uninstalled build in
# target/release (headers from include/, an rpath into target/release) and
# prints its directory, for PKG_CONFIG_PATH: the Go binding's tests link the
# checkout's libapf through the same `#cgo pkg-config: apf` an installed
# one uses.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/target/pkgconfig"
mkdir -p "$dir"
cat >"$dir/apf.pc" <<PC
libdir=$root/target/release
includedir=$root/include

Name: apf
Description: libapf, uninstalled build of $root
Version: 0.0.0-dev
Libs: -L\${libdir} -lapf -Wl,-rpath,\${libdir}
Cflags: -I\${includedir}
PC
echo "$dir"
