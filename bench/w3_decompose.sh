#!/usr/bin/env bash
# Where W3's decisions spend sluiced's CPU beyond its ping floor (docs/BENCHMARKS.md, "W3 against
# its ping floor"). Each round runs, against one sluiced (--shards 1 --huge-pages, the server
# pinned to SERVER_CPU and sluice-load to LOAD_CPU, as compare.sh pins them), W3's frames of 64
# (50 connections, one frame in flight on each) three ways, and prints sluiced's CPU per item:
#   ping   W3's ping floor: PING frames of the same bytes, over 1,000,000 keys;
#   churn  W3 itself: a 100/s token bucket over 1,000,000 keys, so that a key's record has
#          expired (or been dropped) by the time the key comes back and every decision stores a
#          fresh one;
#   live   the same frames over 10,000 keys at 10/s with a burst of 4,000,000,000: a record is
#          neither full again nor exhausted within a run, so every decision updates a live
#          record in cache (the keys' text is 2 bytes shorter an item).
# live - ping is what deciding adds to the transport; churn - live is what storing a fresh
# record adds to updating one.
# Usage: bench/w3_decompose.sh [ROUNDS]
# Environment: BIN_DIR (build-bench/bin: sluiced and sluice-load), SECONDS_EACH (6),
# SERVER_CPU (0), LOAD_CPU (1).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
bin=${BIN_DIR:-build-bench/bin}
secs=${SECONDS_EACH:-6}
server_cpu=${SERVER_CPU:-0}
load_cpu=${LOAD_CPU:-1}
[[ -x "$bin/sluiced" && -x "$bin/sluice-load" ]] || {
  echo "w3_decompose: $bin has no sluiced and sluice-load" >&2
  exit 2
}
# shellcheck source=bench/lib.sh
source bench/lib.sh
dir=$(mktemp -d /tmp/sluice-w3-decompose.XXXXXX)
cleanup() {
  stop_pids "${PIDS[@]}"
  rm -rf "$dir"
}
trap cleanup EXIT
ticks_per_s=$(getconf CLK_TCK)

port=$(free_ports 2)
SLUICED="$bin/sluiced"
start_closed_loop_sluiced w3_decompose "$dir/sluiced.log" "$port" "$server_cpu"
server=$STARTED_PID

run() { # LABEL SLUICE_LOAD_FLAGS...: one run; prints its throughput and sluiced's CPU per item
  local label=$1 t0 t1
  shift
  t0=$(cpu_ticks "$server")
  taskset -c "$load_cpu" "$bin/sluice-load" -q --json --connections 50 --backend sluice \
    --servers "127.0.0.1:$port" --duration "${secs}s" --depth 1 --batch 64 "$@" >"$dir/run.json"
  t1=$(cpu_ticks "$server")
  python3 - "$label" "$dir/run.json" "$t0" "$t1" "$ticks_per_s" "$secs" <<'PY'
import json, sys
label, path = sys.argv[1], sys.argv[2]
t0, t1, hz, secs = (float(x) for x in sys.argv[3:7])
run = json.load(open(path))
if run.get("errors"):
    sys.exit(f"w3_decompose: the {label} run had {run['errors']} errors")
rate = run["throughput_per_s"]
print(f"{label:<6} {rate:>11,.0f}/s  sluiced ns/item {(t1 - t0) / hz * 1e9 / (rate * secs):5.0f}")
PY
}

echo "w3_decompose: $rounds rounds, ${secs} s a run, server on CPU $server_cpu, generator on CPU $load_cpu; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq 1 "$rounds"); do
  run ping --keys 1000000 --op ping
  run churn --keys 1000000 --limit 100 --period 1s
  run live --keys 10000 --limit 10 --period 1s --burst 4000000000
done
