#!/usr/bin/env bash
# Installs libapf for C and C++ (and Go through pkg-config) into a prefix:
#   lib/libapf.so.X.Y.Z, its SONAME link and libapf.so; lib/libapf.a;
#   include/apf.h, include/apf.hpp, include/apf_http.hpp; lib/pkgconfig/apf.pc (and apf-static.pc,
#   which links libapf.a); lib/cmake/apf/ (find_package(apf) -> apf::apf,
#   apf::apf_static).
#
#   scripts/install.sh [--prefix DIR] [--libdir NAME]     (default /usr/local, lib)
#
# The artefacts come from scripts/build-release.sh: stripped of debug info,
# without the test-only exports. The CMake package finds its files relative
# to itself, so an installed prefix can be moved.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=/usr/local
libdir_name=lib
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix="$2"; shift 2 ;;
    --prefix=*) prefix="${1#*=}"; shift ;;
    --libdir) libdir_name="$2"; shift 2 ;;
    --libdir=*) libdir_name="${1#*=}"; shift ;;
    *) echo "usage: scripts/install.sh [--prefix DIR] [--libdir NAME]" >&2; exit 2 ;;
  esac
done

# The C library's version is its ABI's: the apf-capi crate's (capi/Cargo.toml),
# which apf_abi_version() and apf.h's APF_VERSION_* carry too.
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' capi/Cargo.toml | head -1)"
IFS=. read -r major minor _patch <<<"$version"
if [ "$major" = 0 ]; then soversion="0.$minor"; else soversion="$major"; fi

built="$(scripts/build-release.sh)"
lib="$prefix/$libdir_name"
mkdir -p "$lib/pkgconfig" "$lib/cmake/apf" "$prefix/include"

install -m 755 "$built/libapf.so" "$lib/libapf.so.$version"
strip --strip-unneeded "$lib/libapf.so.$version"
ln -sf "libapf.so.$version" "$lib/libapf.so.$soversion"
ln -sf "libapf.so.$soversion" "$lib/libapf.so"
install -m 644 "$built/libapf.a" "$lib/libapf.a"
strip --strip-debug "$lib/libapf.a"
install -m 644 include/apf.h "$prefix/include/apf.h"
install -m 644 bindings/cpp/include/apf.hpp "$prefix/include/apf.hpp"
install -m 644 bindings/cpp/include/apf_http.hpp "$prefix/include/apf_http.hpp"

# How a program linked with `pkg-config --libs apf` (C, and Go through
# `#cgo pkg-config`) finds libapf.so when it starts: a libdir the dynamic
# loader searches (/etc/ld.so.conf: /usr/local/lib, /usr/lib, ...) is made
# current with `ldconfig`; any other prefix gets a run path in apf.pc, so the
# program finds the library where it was installed, with no LD_LIBRARY_PATH.
libdir_real="$(cd "$lib" && pwd -P)"
loader_dirs="$( (ldconfig -v -N 2>/dev/null || true) | sed -n 's|^\(/[^:]*\):.*|\1|p' |
  while read -r d; do readlink -f "$d" || echo "$d"; done)" # /lib is /usr/lib
if grep -qxF "$libdir_real" <<<"$loader_dirs"; then
  rpath=""
  if [ "$(id -u)" = 0 ]; then
    ldconfig
  else
    echo "libapf: $lib is on the loader's path: run ldconfig as root so programs find libapf.so" >&2
  fi
else
  rpath=" -Wl,-rpath,\${libdir}"
fi

# What a static link of a Rust staticlib needs besides libc.
static_libs="-lpthread -ldl -lm -lgcc_s"

pc() { # name, description, Libs line
  cat >"$lib/pkgconfig/$1.pc" <<PC
prefix=$prefix
libdir=\${prefix}/$libdir_name
includedir=\${prefix}/include

Name: $1
Description: $2
Version: $version
URL: https://github.com/libapf/apf
Libs: $3
Libs.private: $static_libs
Cflags: -I\${includedir}
PC
}
pc apf "libapf: Kubernetes API Priority and Fairness and client-go workqueues (shared library)" "-L\${libdir} -lapf$rpath"
pc apf-static "libapf: Kubernetes API Priority and Fairness and client-go workqueues (static library)" "\${libdir}/libapf.a $static_libs"

cat >"$lib/cmake/apf/apfConfig.cmake" <<CMAKE
# find_package(apf) for libapf $version: imported targets apf::apf (shared)
# and apf::apf_static. Paths are relative to this file, so the prefix can move.
get_filename_component(_apf_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(_apf_libdir "\${_apf_prefix}/$libdir_name")
if(NOT TARGET apf::apf)
  add_library(apf::apf SHARED IMPORTED)
  set_target_properties(apf::apf PROPERTIES
    IMPORTED_LOCATION "\${_apf_libdir}/libapf.so.$version"
    IMPORTED_SONAME "libapf.so.$soversion"
    INTERFACE_INCLUDE_DIRECTORIES "\${_apf_prefix}/include")
  find_package(Threads REQUIRED)
  add_library(apf::apf_static STATIC IMPORTED)
  set_target_properties(apf::apf_static PROPERTIES
    IMPORTED_LOCATION "\${_apf_libdir}/libapf.a"
    INTERFACE_INCLUDE_DIRECTORIES "\${_apf_prefix}/include"
    INTERFACE_LINK_LIBRARIES "Threads::Threads;\${CMAKE_DL_LIBS};m")
endif()
set(apf_VERSION $version)
unset(_apf_prefix)
unset(_apf_libdir)
CMAKE

cat >"$lib/cmake/apf/apfConfigVersion.cmake" <<CMAKE
# Compatible: the same SONAME version ($soversion), not older than asked.
set(PACKAGE_VERSION $version)
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif("$major" STREQUAL "0" AND NOT PACKAGE_FIND_VERSION_MAJOR STREQUAL "0")
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif("$major" STREQUAL "0" AND NOT PACKAGE_FIND_VERSION_MINOR STREQUAL "$minor")
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif(NOT "$major" STREQUAL "0" AND NOT PACKAGE_FIND_VERSION_MAJOR STREQUAL "$major")
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
CMAKE

echo "libapf $version installed in $prefix"
