#!/usr/bin/env bash
# Installs what is needed, builds with -Wall -Wextra -Werror and runs every test; then builds
# and runs the same tests under AddressSanitizer + UndefinedBehaviorSanitizer.
# Exits non-zero on any failure. Usage: tools/test.sh [--fast]  (--fast skips the sanitizer pass)
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/deps.sh clang-format

jobs=$(nproc)
fast=0
[ "${1:-}" = "--fast" ] && fast=1

echo "== format check"
mapfile -t sources < <(git ls-files '*.cpp' '*.h')
clang-format --dry-run --Werror "${sources[@]}"

run_suite() {
  local dir=$1; shift
  echo "== configure $dir $*"
  cmake -S . -B "$dir" -G Ninja -DSLUICE_WERROR=ON "$@" >/dev/null
  echo "== build $dir"
  cmake --build "$dir" -j "$jobs"
  echo "== test $dir"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" --timeout 300
}

run_suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ "$fast" -eq 0 ]; then
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # -O0 (Debug): gcc 12 with sanitizers at -O1 raises false -Wmaybe-uninitialized in libstdc++.
  run_suite build-sanitize -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=address,undefined \
    -DSLUICE_BUILD_BENCH=OFF
fi
echo "== all tests passed"
