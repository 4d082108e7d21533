#!/usr/bin/env bash
# Builds the release artefacts of libapf as they are installed: libapf.so
# with its SONAME, libapf.a, no debug info, no test hooks. The one build
# shared by scripts/install.sh and the Python wheel (bindings/python/setup.py).
#
#   scripts/build-release.sh     prints the directory holding libapf.so/.a
#
# A target directory of its own (target/install) keeps these settings from
# rebuilding the test builds in target/release, which carry test hooks.
set -euo pipefail
cd "$(dirname "$0")/.."

# The C library's version is its ABI's: the apf-capi crate's (capi/Cargo.toml),
# which apf_abi_version() and apf.h's APF_VERSION_* carry too.
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' capi/Cargo.toml | head -1)"
IFS=. read -r major minor _patch <<<"$version"
# The ABI promise (docs/install.md): before 1.0 each minor version may
# break it, so the SONAME carries MAJOR.MINOR; from 1.0 on, MAJOR alone.
if [ "$major" = 0 ]; then soversion="0.$minor"; else soversion="$major"; fi

export CARGO_TARGET_DIR="$PWD/target/install"
export CARGO_PROFILE_RELEASE_DEBUG=false
export CARGO_PROFILE_RELEASE_STRIP=debuginfo
# libapf (capi/artifact) is the C library: the apf-capi crate linked into
# a cdylib and a staticlib; the SONAME goes to its link only.
cargo rustc --quiet --release --lib -p libapf \
  -- -C link-arg=-Wl,-soname,libapf.so."$soversion" >&2
echo "$CARGO_TARGET_DIR/release"
