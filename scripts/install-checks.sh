#!/usr/bin/env bash
# Proves that libapf installs and is usable from outside the repository,
# each language from a temporary directory with nothing from the source tree
# but the install artefacts (issue 12):
#   1. C with `pkg-config --cflags --libs apf` only, C++ with
#      find_package(apf) only; the SONAME; no test hook exported.
#   2. Python: the wheel, installed into a fresh venv, starts and finishes a
#      request and uses a workqueue with no environment variable.
#   3. Go: a program built against the installed prefix (pkg-config) runs
#      with no LD_LIBRARY_PATH; one built with -tags apf_static, moved
#      elsewhere, runs after the prefix is deleted.
#   4. Rust: a crate depending on apf (default features) has no clap or
#      indicatif in its `cargo tree`, builds, and its build produces no
#      libapf.so or libapf.a.
# Called by scripts/test-all.sh. APF_INSTALL_CHECKS="c rust" runs a subset.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
here="$repo/scripts/install-checks"
checks="${APF_INSTALL_CHECKS:-c rust python go}"

step() { printf '\n--> install check: %s\n' "$*"; }
fail() { echo "install check FAILED: $*" >&2; exit 1; }
wants() { [[ " $checks " == *" $1 "* ]]; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

command -v pkg-config >/dev/null && command -v cmake >/dev/null && command -v g++ >/dev/null ||
  { apt-get update -qq && apt-get install -y -qq pkg-config cmake g++ >/dev/null; }

step "install into a temporary prefix"
"$repo/scripts/install.sh" --prefix "$prefix"
lib="$prefix/lib"

if wants c; then
  step "SONAME and exports"
  soname="$(readelf -d "$lib/libapf.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')"
  [ -n "$soname" ] && [ -e "$lib/$soname" ] || fail "no SONAME, or no $soname link"
  echo "SONAME $soname"
  exports="$(nm -D --defined-only "$lib/libapf.so" | awk '{print $3}')"
  grep -qx apf_finish <<<"$exports" || fail "apf_finish is not exported"
  for hook in apf_test_panic apf_workqueue_test_panic apf_workqueue_test_parked apf_request_finish; do
    ! grep -qx "$hook" <<<"$exports" || fail "$hook is exported"
  done
  ! readelf -S "$lib/libapf.so" | grep -q '\.debug_' || fail "libapf.so carries debug info"

  step "C with pkg-config only"
  mkdir "$work/c" && cp "$here/main.c" "$work/c/"
  (cd "$work/c" &&
    export PKG_CONFIG_PATH="$lib/pkgconfig" &&
    # shellcheck disable=SC2046 # pkg-config's words are separate flags
    cc -std=c11 -Wall -Werror main.c $(pkg-config --cflags --libs apf) -o check &&
    env -u LD_LIBRARY_PATH ./check) # the run path apf.pc gives finds libapf

  step "C++ with find_package(apf) only"
  mkdir "$work/cpp" && cp "$here/main.cpp" "$here/CMakeLists.txt" "$work/cpp/"
  cmake -S "$work/cpp" -B "$work/cpp/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  cmake --build "$work/cpp/build" >/dev/null
  env -u LD_LIBRARY_PATH "$work/cpp/build/check" # CMake's run path
fi

if wants rust; then
  step "a Rust crate depending on apf: no CLI dependencies, no C library"
  mkdir -p "$work/rust/src"
  sed "s|APF_PATH|$repo|" "$here/rust-Cargo.toml" >"$work/rust/Cargo.toml"
  cp "$here/rust-main.rs" "$work/rust/src/main.rs"
  cp "$repo/Cargo.lock" "$work/rust/Cargo.lock" # the versions the repository tested
  tree="$(cd "$work/rust" && cargo tree -e normal)"
  ! grep -Eq '^.* (clap|indicatif) v' <<<"$tree" || fail "clap or indicatif in the library's tree"
  # A target directory that survives the temporary one, so reruns are quick.
  rust_target="$repo/target/install-check-rust"
  # The apf crate is an ordinary rlib: a Rust dependent builds no C library
  # (the C ABI is capi/, a crate of its own). C libraries left by builds of
  # older layouts are removed first, so the check sees this build's output.
  find "$rust_target" \( -name 'libapf*.so*' -o -name 'libapf*.a' \) -delete 2>/dev/null || true
  (cd "$work/rust" && CARGO_TARGET_DIR="$rust_target" cargo run --quiet)
  c_libs="$(find "$rust_target" \( -name 'libapf*.so*' -o -name 'libapf*.a' \))"
  [ -z "$c_libs" ] || fail "a Rust dependent's build produced a C library: $c_libs"
fi

if wants python; then
  step "Python: the wheel in a fresh venv"
  "$repo/bindings/python/install-check.sh" "$work/python"
fi

if wants go; then
  step "Go: modules from a file proxy (no replace); shared build with no LD_LIBRARY_PATH; static build, moved, without the prefix"
  "$repo/bindings/go/install-check.sh" "$prefix" "$work/go"
fi
echo "install checks passed: $checks"
