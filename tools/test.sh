#!/usr/bin/env bash
# The project's own checks, in this order; exits non-zero on any failure:
#   format  clang-format over every C++ file in the tree (a fresh clone or a release tarball:
#           no git needed)
#   normal  build with -Wall -Wextra -Werror (RelWithDebInfo), run every test, then install the
#           build into a temporary prefix and build and run examples/embed against it
#           (find_package and pkg-config: tools/check_install.sh); then make the Debian
#           packages and check them (tools/check_packages.sh)
#   asan    build and run every test again under AddressSanitizer + UndefinedBehaviorSanitizer
#   tsan    build and run the server, client, integration, rules, http and gateway tests under
#           ThreadSanitizer
#   fuzz    build the libFuzzer targets with clang and replay their corpus (tools/fuzz.sh)
# After each test run, every test binary's listed test cases must be exactly the ones ctest ran,
# each once; the counts are printed per binary. The wall time of each phase is printed at the end.
# Usage: tools/test.sh [--fast]  (--fast: format and the normal pass only)
set -euo pipefail
cd "$(dirname "$0")/.."

fast=0
case "${1:-}" in
  "") ;;
  --fast) fast=1 ;;
  *)
    echo "usage: tools/test.sh [--fast]" >&2
    exit 2
    ;;
esac

bash tools/deps.sh clang-format clang libclang-rt-14-dev

# Some kernels randomize mmap with more bits than gcc 12's ThreadSanitizer supports ("FATAL:
# ThreadSanitizer: unexpected memory mapping"). There the whole script runs again without
# address space randomization (children inherit it: the build lists tests, ctest runs them).
if [ "$fast" -eq 0 ] && [ -z "${SLUICE_TEST_NO_ASLR:-}" ]; then
  probe=$(mktemp -d)
  echo 'int main() { return 0; }' | g++ -fsanitize=thread -x c++ - -o "$probe/tsan-probe"
  if ! "$probe/tsan-probe" >/dev/null 2>&1; then
    rm -rf "$probe"
    echo "== ThreadSanitizer fails on this kernel with ASLR; running under setarch -R"
    SLUICE_TEST_NO_ASLR=1 exec setarch "$(uname -m)" -R bash tools/test.sh "$@"
  fi
  rm -rf "$probe"
fi

jobs=$(nproc)
timings=()
phase="" phase_start=0 started=$SECONDS
print_timings() {
  if [ -n "$phase" ]; then
    timings+=("$(printf '  %-24s %5d s  failed' "$phase" $((SECONDS - phase_start)))")
  fi
  [ "${#timings[@]}" -gt 0 ] || return 0
  echo "== wall time per phase"
  printf '%s\n' "${timings[@]}"
  printf '  %-24s %5d s\n' total $((SECONDS - started))
}
trap print_timings EXIT

# timed LABEL COMMAND...: runs COMMAND and records its wall time under LABEL.
timed() {
  phase=$1 phase_start=$SECONDS
  shift
  "$@"
  timings+=("$(printf '  %-24s %5d s' "$phase" $((SECONDS - phase_start)))")
  phase=""
}

format_check() {
  echo "== format check"
  # Every C++ file outside build directories and dot-directories, found without git.
  local sources=()
  mapfile -d '' -t sources < <(find . \( -path './build*' -o -path './out' -o -path './.*' \) \
    -prune -o -type f \( -name '*.cpp' -o -name '*.h' \) -print0 | sort -z)
  # With no file, clang-format would read standard input (and wait forever in a terminal).
  if [ "${#sources[@]}" -eq 0 ]; then
    echo "format check: no C++ sources found" >&2
    return 1
  fi
  clang-format --dry-run --Werror "${sources[@]}"
  echo "${#sources[@]} files formatted"
}

# configure_and_build DIR "TARGET..." CMAKE_ARGS...: an empty target list builds everything.
configure_and_build() {
  local dir=$1 targets=()
  read -r -a targets <<<"$2"
  shift 2
  echo "== configure $dir $*"
  cmake -S . -B "$dir" -G Ninja -DSLUICE_WERROR=ON "$@" >/dev/null
  echo "== build $dir ${targets[*]}"
  cmake --build "$dir" -j "$jobs" ${targets[@]+--target "${targets[@]}"}
}

# check_counts RECORD_DIR BINARY...: a binary's listed test cases (hidden ones are neither
# listed nor registered with ctest) must be exactly those its processes recorded as run, each
# once.
check_counts() {
  local record=$1 status=0 bin name listed ran count rc expected problem hidden
  shift
  echo "== test cases per binary: listed by the binary / run by ctest"
  for bin in "$@"; do
    name=$(basename "$bin")
    rc=0
    listed=$("$bin" --list-test-names-only | LC_ALL=C sort) || rc=$?
    count=$(grep -c . <<<"$listed" || true)
    # --list-test-names-only exits with the number of tests listed (at most 255).
    expected=$((count > 255 ? 255 : count))
    ran=$(cat "$record/$name".*.ran 2>/dev/null | LC_ALL=C sort || true)
    problem=""
    if [ "$rc" -ne "$expected" ] || [ "$count" -eq 0 ]; then
      problem="listing failed (exit $rc)"
    elif [ "$listed" != "$ran" ]; then
      problem="mismatch"
    fi
    # Hidden tests ([.] or [!hide]) run only when asked for by name: say how many there are.
    hidden=$("$bin" --list-test-names-only '[.]' | grep -c . || true)
    printf '  %-20s %4d / %4d  %s%s\n' "$name" "$count" "$(grep -c . <<<"$ran" || true)" \
      "${problem:-ok}" "$([ "$hidden" -eq 0 ] || echo " ($hidden hidden, not run)")"
    if [ -n "$problem" ]; then
      status=1
      [ "$rc" -ne "$expected" ] && "$bin" --check-test-names >&2 || true
      diff <(grep . <<<"$listed") <(grep . <<<"$ran") |
        sed -n 's/^< /    never run: /p; s/^> /    run but not listed, or run twice: /p' |
        head -n 20 >&2 || true
    fi
  done
  return "$status"
}

# run_tests DIR BINARY...: runs the ctest entries of the given test binaries (binary X_tests
# registers its tests as "X:<name>"), then checks the counts even when a test failed.
run_tests() {
  local dir=$1 rc=0 bin prefixes=()
  shift
  for bin in "$@"; do
    prefixes+=("$(basename "$bin" _tests)")
  done
  local record=$PWD/$dir/test-record
  rm -rf "$record"
  mkdir -p "$record"
  echo "== test $dir"
  SLUICE_TEST_RECORD_DIR=$record ctest --test-dir "$dir" --output-on-failure -j "$jobs" \
    --timeout 300 --no-tests=error -R "^($(IFS="|" && echo "${prefixes[*]}")):" || rc=1
  check_counts "$record" "$@" || rc=1
  return "$rc"
}

test_binaries() {  # test_binaries DIR: every test binary built in DIR
  local bin
  for bin in "$1"/bin/*_tests; do
    [ -x "$bin" ] && echo "$bin"
  done
}

normal_pass() {
  local dir=build bins=()
  timed "normal: configure+build" configure_and_build "$dir" "" -DCMAKE_BUILD_TYPE=RelWithDebInfo
  mapfile -t bins < <(test_binaries "$dir")
  timed "normal: test" run_tests "$dir" "${bins[@]}"
  # The build as a C++ project outside the tree uses it: installed, found, linked, run.
  timed "normal: install check" bash tools/check_install.sh "$dir"
  # The Debian packages: made, installed into a throwaway root, run, units verified.
  timed "normal: package check" bash tools/check_packages.sh "$dir"
}

asan_pass() {
  local dir=build-asan bins=()
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # -O0 (Debug): gcc 12 with sanitizers at -O1 raises false -Wmaybe-uninitialized in libstdc++.
  timed "asan: configure+build" configure_and_build "$dir" "" -DCMAKE_BUILD_TYPE=Debug \
    -DSLUICE_SANITIZE=address,undefined -DSLUICE_BUILD_BENCH=OFF
  mapfile -t bins < <(test_binaries "$dir")
  timed "asan: test" run_tests "$dir" "${bins[@]}"
}

# The code with threads: the daemon's shards and hand-over queues, the client's I/O thread, the
# rules' watcher and snapshot swaps, the gateway's RLS front (without gRPC: rls_tests are left
# out, tests/CMakeLists.txt says why).
tsan_pass() {
  local dir=build-tsan
  local targets=(server_tests client_tests integration_tests rules_tests http_tests grpc_tests
    gateway_tests)
  export TSAN_OPTIONS=second_deadlock_stack=1
  timed "tsan: configure+build" configure_and_build "$dir" "${targets[*]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_SANITIZE=thread -DSLUICE_BUILD_BENCH=OFF
  timed "tsan: test" run_tests "$dir" "${targets[@]/#/$dir/bin/}"
}

timed "format" format_check
normal_pass
if [ "$fast" -eq 0 ]; then
  asan_pass
  tsan_pass
  timed "fuzz: build+replay" bash tools/fuzz.sh --replay
fi
echo "== all checks passed"
