#!/usr/bin/env bash
# The client's micro-benchmarks (bench/client_bench.cpp) as docs/BENCHMARKS.md publishes them:
# one process pinned to one core, 5 repetitions, the median of each.
#
#   bench/client_micro.sh [BUILD_DIR] [CPU]     (defaults: build, 1)
#
# Build first: cmake --build BUILD_DIR --target client_bench (a RelWithDebInfo build).
set -euo pipefail
build=${1:-build}
cpu=${2:-1}
bin="$build/bin/client_bench"
[[ -x "$bin" ]] || { echo "client_micro.sh: $bin is missing: cmake --build $build --target client_bench" >&2; exit 2; }
echo "client_bench pinned to CPU $cpu, 5 repetitions, medians ($(date -u +%Y-%m-%dT%H:%MZ), $(git rev-parse --short HEAD))"
taskset -c "$cpu" "$bin" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  2>/dev/null | awk '/_median/ { sub(/_median/, "", $1); printf "%-34s %8s %s\n", $1, $2, $3 }'
