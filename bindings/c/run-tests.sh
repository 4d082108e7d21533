#!/usr/bin/env bash
# Builds libapf (release) and the C binding's programs with
#   gcc -std=c11 -Wall -Wextra -Wpedantic -Werror
# runs the test programs (test_apf: dispatcher, test_wq: workqueues,
# test_request_info: the path helper on tests/data/request-info-cases.json)
# and the example server, then both again under
# AddressSanitizer + UndefinedBehaviorSanitizer (the C side is sanitized;
# libapf itself is not). Also checks that apf.h compiles as C++17.
set -euo pipefail
cd "$(dirname "$0")/../.."

step() { printf '\n==> %s\n' "$*"; }

CC="${CC:-gcc}"
CXX="${CXX:-g++}"
LIB="$PWD/target/release"
OUT="$PWD/target/c-binding"
mkdir -p "$OUT"

step "c: build libapf (release)"
cargo build --release -p libapf --features test-hooks

CFLAGS=(-std=c11 -Wall -Wextra -Wpedantic -Werror -g -Iinclude)
LDFLAGS=(-L"$LIB" -lapf -Wl,-rpath,"$LIB" -pthread)
SAN=(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)

build() { # name, extra flags...
  local name="$1"; shift
  "$CC" "${CFLAGS[@]}" "$@" "bindings/c/$name.c" -o "$OUT/$name$SUFFIX" "${LDFLAGS[@]}"
}

step "c: apf.h compiles as C11 and as C++17 (included twice)"
printf '#include "apf.h"\n#include "apf.h"\nint main(void) { return apf_abi_version() == APF_VERSION_NUMBER ? 0 : 1; }\n' > "$OUT/header_twice.c"
"$CC" "${CFLAGS[@]}" "$OUT/header_twice.c" -o "$OUT/header_twice" "${LDFLAGS[@]}"
"$OUT/header_twice"
"$CXX" -std=c++17 -Wall -Wextra -Wpedantic -Werror -Iinclude -x c++ -fsyntax-only "$OUT/header_twice.c"

# The shared request-info cases as tab-separated lines (C has no JSON).
CASES="$OUT/request-info-cases.tsv"
python3 scripts/request-info-cases-tsv.py tests/data/request-info-cases.json "$CASES"

step "c: test programs and example server"
SUFFIX="" build test_apf
SUFFIX="" build test_observe
SUFFIX="" build test_wq
SUFFIX="" build test_request_info
SUFFIX="" build example_server
SUFFIX="" build bench_apf -O2
SUFFIX="" build profile_finish -O2  # for callgrind (docs/adaptive-limit.md); not run here
"$OUT/test_apf"
"$OUT/test_observe"
"$OUT/test_wq"
"$OUT/test_request_info" "$CASES"
"$OUT/example_server"
"$OUT/bench_apf" 20000 # a smoke run; real figures need a quiet machine

step "c: again under ASan + UBSan"
SUFFIX="-san" build test_apf "${SAN[@]}"
SUFFIX="-san" build test_observe "${SAN[@]}"
SUFFIX="-san" build test_wq "${SAN[@]}"
SUFFIX="-san" build test_request_info "${SAN[@]}"
SUFFIX="-san" build example_server "${SAN[@]}"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
"$OUT/test_apf-san"
"$OUT/test_observe-san"
"$OUT/test_wq-san"
"$OUT/test_request_info-san" "$CASES"
"$OUT/example_server-san"
echo "c: all passed"
