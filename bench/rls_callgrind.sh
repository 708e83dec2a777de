#!/usr/bin/env bash
# Instructions per ShouldRateLimit call of sluice-gateway binaries, counted by valgrind's
# callgrind: a count that does not move with the host's load the way CPU time does on this
# shared machine, so small user-space changes can be compared (the kernel's part of a call, its
# syscalls and context switches, is not in it: bench/rls_ab.sh measures that side).
#
# For each binary in turn: a one-shard sluiced and the gateway under callgrind (instrumentation
# off until a 1 s warm-up has run), then sluice-load --backend rls with 3 descriptors, one
# connection and one call in flight (so no two calls share a read or a write), for SECONDS_EACH
# seconds; the count covers that run and the gateway's shutdown. Prints one line per binary.
# Usage: bench/rls_callgrind.sh BINARY [BINARY...]
# Environment: SECONDS_EACH (8), BUILD_DIR (build).
set -euo pipefail
cd "$(dirname "$0")/.."
(($# > 0)) || { echo "usage: bench/rls_callgrind.sh BINARY [BINARY...]" >&2; exit 2; }
secs=${SECONDS_EACH:-8}
bin=${BUILD_DIR:-build}/bin
for tool in valgrind callgrind_control callgrind_annotate python3; do
  command -v "$tool" >/dev/null || { echo "rls_callgrind: $tool not found" >&2; exit 1; }
done
# shellcheck source=bench/lib.sh
source bench/lib.sh
dir=$(mktemp -d /tmp/sluice-rls-callgrind.XXXXXX)
cleanup() {
  stop_pids "${PIDS[@]}"
  rm -rf "$dir"
}
trap cleanup EXIT
rls_bench_config "$dir/bench.yaml"

echo "rls_callgrind: 3 descriptors, 1 connection, 1 call in flight, ${secs} s per binary"
for gateway in "$@"; do
  port=$(free_ports 5)
  "$bin/sluiced" --port "$port" --shards 1 --max-memory 1GiB --idle-timeout 0 \
    >"$dir/sluiced.log" 2>&1 &
  s=$!
  PIDS+=("$s")
  listening "$port" "$s" || { cat "$dir/sluiced.log" >&2; exit 1; }
  # The deadline is generous: under callgrind the gateway runs some 50 times slower.
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$dir/callgrind.out" \
    "$gateway" --listen "127.0.0.1:$((port + 3))" --grpc-listen "127.0.0.1:$((port + 4))" \
    --servers "127.0.0.1:$port" --rules "$dir/bench.yaml" --failure-policy closed \
    --rls-deadline 2000ms >"$dir/gateway.log" 2>&1 &
  g=$!
  PIDS+=("$g")
  # Slow to start under valgrind: twice listening's 10 s at most.
  listening "$((port + 4))" "$g" || listening "$((port + 4))" "$g" ||
    { cat "$dir/gateway.log" >&2; exit 1; }
  load=("$bin/sluice-load" -q --json --keys 100000 --connections 1 --depth 1
    --algorithm fixed_window --limit 1000000 --period 1s --backend rls
    --servers "127.0.0.1:$((port + 4))" --descriptors 3 --rls-domain bench)
  # A run with errors exits 1; its JSON says what happened, and the report refuses it.
  "${load[@]}" --duration 1s >/dev/null || true
  callgrind_control -i on "$g" >/dev/null
  "${load[@]}" --duration "${secs}s" >"$dir/run.json" || true
  stop_pid "$g"  # callgrind writes its counts as the gateway exits
  stop_pid "$s"
  total=$(callgrind_annotate "$dir/callgrind.out" 2>/dev/null |
    awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  python3 - "$gateway" "$dir/run.json" "$total" <<'PY'
import json, sys
name, path, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
r = json.load(open(path))
calls = round(r["throughput_per_s"] * r["duration_s"])
if calls == 0 or r["errors"] != 0 or total == 0:
    sys.exit(f"{name}: {calls} calls, errors {r['errors']}, {total} instructions: no figure")
print(f"{name}: {calls} calls, errors {r['errors']}, {total:,} instructions,"
      f" {total / calls:,.0f} per call")
PY
  rm -f "$dir/callgrind.out"
done
