#!/usr/bin/env bash
# Builds libapf, then builds and runs the C++ binding's tests twice: plain,
# and under AddressSanitizer + UndefinedBehaviorSanitizer.
#
#   bindings/cpp/run-tests.sh            # both configurations
#   APF_CPP_CONFIGS=plain bindings/cpp/run-tests.sh
#   APF_CPP_LIB_DIR=/path/to/release bindings/cpp/run-tests.sh   # prebuilt libapf.so, no cargo
#
# Installs cmake, g++ and GoogleTest (Debian packages) when they are missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${APF_CPP_BUILD_DIR:-$root/target/cpp}"
configs="${APF_CPP_CONFIGS:-plain sanitize}"
lib_dir="${APF_CPP_LIB_DIR:-}"

install_missing() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v g++ >/dev/null || missing+=(g++)
  dpkg -s libgtest-dev >/dev/null 2>&1 || missing+=(libgtest-dev)
  if [ ${#missing[@]} -eq 0 ]; then
    return
  fi
  echo "installing ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${missing[@]}"
}

install_missing
if [ -z "$lib_dir" ]; then
  (cd "$root" && cargo build --release -p libapf --features test-hooks)
  lib_dir="$root/target/release"
fi

for config in $configs; do
  case "$config" in
    plain) sanitize=OFF ;;
    sanitize) sanitize=ON ;;
    *) echo "unknown configuration $config" >&2; exit 2 ;;
  esac
  echo "== C++ binding: $config"
  cmake -S "$here" -B "$build/$config" -DCMAKE_BUILD_TYPE=Debug \
    -DAPF_SANITIZE="$sanitize" -DAPF_LIB_DIR="$lib_dir" >/dev/null
  cmake --build "$build/$config" -j "$(nproc)"
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    ctest --test-dir "$build/$config" --output-on-failure -j 2
done
