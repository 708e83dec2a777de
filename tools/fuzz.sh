#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/, clang) in build-fuzz/ and runs them.
#
#   tools/fuzz.sh SECONDS [--save] [TARGET]
#                                   fuzz each target for SECONDS, one after the other, starting
#                                   from its corpus in tests/fuzz/corpus/TARGET/. New inputs go
#                                   to build-fuzz/corpus/TARGET/, not into the repository; --save
#                                   merges those that reach new code into the repository's corpus
#                                   (new edges only, not new hit counts, so that it stays small).
#   tools/fuzz.sh --replay [TARGET] run each target once over its corpus and its generated seeds
#                                   (seconds; tools/test.sh does this).
#   tools/fuzz.sh --seeds [TARGET]  rewrite the generated seeds in tests/fuzz/corpus/ (a target
#                                   NAME_fuzz has a seed writer NAME_corpus when it has seeds).
# TARGET (a NAME_fuzz target of tests/fuzz/CMakeLists.txt, e.g. frame_fuzz) limits the run to it;
# without it every target runs. One fuzzer process at a time, on one core.
# A crash leaves its input in build-fuzz/artifacts/ and makes the script exit non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: tools/fuzz.sh SECONDS [--save] [TARGET] | --replay [TARGET] | --seeds [TARGET]" >&2
  exit 2
}
[ "$#" -ge 1 ] || usage
mode=fuzz seconds=0 save=0 only=""
case "$1" in
  --replay) mode=replay ;;
  --seeds) mode=seeds ;;
  *[!0-9]* | '') usage ;;
  *) seconds=$1 ;;
esac
[ "$mode" = fuzz ] && [ "$seconds" -eq 0 ] && usage
shift
for arg in "$@"; do
  case "$arg" in
    --save)
      [ "$mode" = fuzz ] && [ "$save" -eq 0 ] || usage
      save=1
      ;;
    -* | '') usage ;;
    *)
      [ -z "$only" ] || usage
      only=$arg
      ;;
  esac
done

bash tools/deps.sh clang libclang-rt-14-dev

build=build-fuzz
echo "== configure $build (clang, libFuzzer)"
CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_FUZZ=ON \
  -DSLUICE_WERROR=ON -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_BENCH=OFF >/dev/null
echo "== build $build"
cmake --build "$build" -j "$(nproc)" --target fuzz_targets
targets=()
for bin in "$build"/bin/*_fuzz; do
  [ -x "$bin" ] && targets+=("$(basename "$bin")")
done
[ "${#targets[@]}" -gt 0 ] || { echo "no *_fuzz targets in $build/bin" >&2; exit 1; }
if [ -n "$only" ]; then
  if [[ " ${targets[*]} " != *" $only "* ]]; then
    echo "no fuzz target $only (there are: ${targets[*]})" >&2
    exit 2
  fi
  targets=("$only")
fi

mkdir -p "$build/artifacts"
status=0
for target in "${targets[@]}"; do
  bin=$build/bin/$target
  corpus=tests/fuzz/corpus/$target
  writer=$build/bin/${target%_fuzz}_corpus
  seeds=$build/seeds/$target
  mkdir -p "$corpus"
  case "$mode" in
    seeds)
      if [ -x "$writer" ]; then
        "$writer" "$corpus"
        echo "$target: seeds written to $corpus"
      fi
      ;;
    replay)
      inputs=("$corpus"/*)
      if [ -x "$writer" ]; then
        rm -rf "$seeds" && "$writer" "$seeds"
        inputs+=("$seeds"/*)
      fi
      if [ ! -e "${inputs[0]}" ]; then
        echo "$target: no corpus in $corpus" >&2
        status=1
        continue
      fi
      log=$build/$target.replay.log
      if "$bin" -artifact_prefix="$build/artifacts/$target-" "${inputs[@]}" >"$log" 2>&1; then
        echo "$target: ${#inputs[@]} inputs replayed, no failure"
      else
        tail -n 40 "$log" >&2
        echo "$target: FAILED on replay (whole log: $log)" >&2
        status=1
      fi
      ;;
    fuzz)
      work=$build/corpus/$target
      mkdir -p "$work"
      echo "== fuzz $target for ${seconds}s (new inputs in $work)"
      # libFuzzer stops itself after -max_total_time; `timeout` bounds a hang in the target.
      if ! timeout --kill-after=10 $((seconds + 60)) "$bin" -max_total_time="$seconds" \
        -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/$target-" "$work" "$corpus"; then
        echo "$target: FAILED (crash input in $build/artifacts/)" >&2
        status=1
        continue
      fi
      if [ "$save" -eq 1 ]; then
        before=$(find "$corpus" -type f | wc -l)
        "$bin" -merge=1 -use_counters=0 "$corpus" "$work" >"$build/$target.merge.log" 2>&1
        after=$(find "$corpus" -type f | wc -l)
        echo "$target: $((after - before)) new inputs saved to $corpus"
      fi
      ;;
  esac
done
exit "$status"
