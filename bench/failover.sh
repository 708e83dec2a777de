#!/usr/bin/env bash
# The failover figures of issue 14 (docs/RELIABILITY.md, "Failover with etcd"): 20 rounds of
# kill -9 of a primary under traffic, failover, restart, active again, against a throwaway etcd
# and three sluiced processes on loopback (tests/failover/failover_test.cpp, the hidden
# "twenty kills in a loop"). Prints one line per round and the summary: the gap the client sees
# (median, max), the counts lost, the over-admission. Timings here are set by the lease TTL
# (2 s), not by CPU, so nothing is pinned.
# Usage: BUILD_DIR=build bash bench/failover.sh [--quorum]   (--quorum: against a 3-member etcd)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
bin=$build/bin/failover_tests
if [ ! -x "$bin" ]; then
  echo "bench/failover.sh: $bin is missing: cmake --build $build" >&2
  exit 2
fi
echo "== $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
test_name="etcd mode: twenty kills in a loop"
case "${1:-}" in
  "") ;;
  --quorum) test_name="3-member etcd: twenty kills in a loop" ;;
  *)
    echo "usage: bench/failover.sh [--quorum]" >&2
    exit 2
    ;;
esac
"$bin" "$test_name" | grep -E '^FAILOVER:|passed|failed|FAILED'
