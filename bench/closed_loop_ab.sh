#!/usr/bin/env bash
# Two builds side by side on one of compare.sh's closed-loop workloads (50 connections, token
# bucket 100/s over 1,000,000 keys, sluiced --shards 1 --huge-pages): W3 by default (depth 1,
# 64 decisions a frame), W2 with DEPTH=16 BATCH=1, W1 with DEPTH=1 BATCH=1. For each round, each
# build in turn runs the workload and its ping floor (PING frames of the same size) against one
# fresh sluiced, the server pinned to SERVER_CPU and the generator to LOAD_CPU, and prints one
# line per build with both throughputs, their ratio and each process's CPU per item (utime +
# stime over the run, from /proc; sluice-load's from bash's times). The builds alternate, and so
# does which goes first, so that a host drifting over a round does not favour one. Used to keep
# the change that proved a win (docs/BENCHMARKS.md, "W3 against its ping floor").
# Usage: bench/closed_loop_ab.sh BEFORE_BIN_DIR AFTER_BIN_DIR [ROUNDS]
#   each BIN_DIR holds sluiced and sluice-load (e.g. build-bench/bin)
# Environment: DEPTH (1), BATCH (64), SECONDS_EACH (8), SERVER_CPU (0), LOAD_CPU (1), as
# compare.sh pins them; PING=0 leaves the ping floors out (a comparison of the servers' CPU per
# decision only: more, shorter rounds in the same time). Ends with the median over the rounds
# of after / before in sluiced's CPU per decision, each round's pair run back to back.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: bench/closed_loop_ab.sh BEFORE_BIN_DIR AFTER_BIN_DIR [ROUNDS]"
before=${1:?$usage}
after=${2:?$usage}
rounds=${3:-3}
depth=${DEPTH:-1}
batch=${BATCH:-64}
secs=${SECONDS_EACH:-8}
with_ping=${PING:-1}
server_cpu=${SERVER_CPU:-0}
load_cpu=${LOAD_CPU:-1}
for d in "$before" "$after"; do
  [[ -x "$d/sluiced" && -x "$d/sluice-load" ]] || {
    echo "closed_loop_ab: $d has no sluiced and sluice-load" >&2
    exit 2
  }
done
# shellcheck source=bench/lib.sh
source bench/lib.sh
dir=$(mktemp -d /tmp/sluice-closed-ab.XXXXXX)
cleanup() {
  stop_pids "${PIDS[@]}"
  rm -rf "$dir"
}
trap cleanup EXIT
ticks_per_s=$(getconf CLK_TCK)

# load BIN_DIR PORT OP_FLAGS...: one pinned sluice-load run; prints "items/s load_cpu_s".
load() {
  local bin=$1 port=$2 out
  shift 2
  out=$(
    TIMEFORMAT='%U %S'
    {
      time taskset -c "$load_cpu" "$bin/sluice-load" -q --json --connections 50 --backend sluice \
        --servers "127.0.0.1:$port" --keys 1000000 --duration "${secs}s" --depth "$depth" --batch "$batch" \
        "$@" >"$dir/run.json"
    } 2>&1
  )
  python3 - "$dir/run.json" "$out" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))
if run.get("errors"):
    sys.exit(f"closed_loop_ab: the run had {run['errors']} errors")
user, sys_ = (float(x) for x in sys.argv[2].split()[-2:])
print(int(run["throughput_per_s"]), user + sys_)
EOF
}

one() { # LABEL BIN_DIR
  local label=$1 bin=$2 port s t0 t1 t2 ping acquire ping_cpu acquire_cpu
  port=$(free_ports 2)
  SLUICED="$bin/sluiced"
  start_closed_loop_sluiced closed_loop_ab "$dir/sluiced.log" "$port" "$server_cpu"
  s=$STARTED_PID
  t0=$(cpu_ticks "$s")
  ping=0 ping_cpu=0
  if ((with_ping)); then read -r ping ping_cpu < <(load "$bin" "$port" --op ping) || true; fi
  t1=$(cpu_ticks "$s")
  read -r acquire acquire_cpu < <(load "$bin" "$port" --limit 100 --period 1s) || true
  t2=$(cpu_ticks "$s")
  # A run that failed printed why and left its figures empty.
  [[ -n "$ping" && -n "$acquire" ]] || {
    echo "closed_loop_ab: a run of $label failed" >&2
    exit 1
  }
  stop_pid "$s"
  python3 - "$label" "$ping" "$acquire" "$t0" "$t1" "$t2" "$ticks_per_s" "$secs" \
    "$ping_cpu" "$acquire_cpu" "$dir/costs" <<'EOF'
import sys
label = sys.argv[1]
ping, acquire, t0, t1, t2, hz, secs = (float(x) for x in sys.argv[2:9])
ping_cpu, acquire_cpu = float(sys.argv[9]), float(sys.argv[10])
def ns(cpu_s, rate):
    return cpu_s * 1e9 / (rate * secs)
server_ns = ns((t2 - t1) / hz, acquire)
with open(sys.argv[11], "a") as costs:
    costs.write(f"{label} {server_ns}\n")
if ping == 0:
    print(f"{label:<7} acquire {acquire:>11,.0f}/s  sluiced ns/item {server_ns:5.0f}  "
          f"sluice-load ns/item {ns(acquire_cpu, acquire):5.0f}")
    sys.exit()
print(f"{label:<7} ping {ping:>11,.0f}/s  acquire {acquire:>11,.0f}/s  acquire/ping {acquire / ping:.3f}  "
      f"sluiced ns/item: ping {ns((t1 - t0) / hz, ping):5.0f} acquire {server_ns:5.0f}  "
      f"sluice-load ns/item: ping {ns(ping_cpu, ping):5.0f} acquire {ns(acquire_cpu, acquire):5.0f}")
EOF
}

echo "closed_loop_ab: depth $depth, batch $batch; before $before, after $after; $rounds rounds, ${secs} s a run, server on CPU $server_cpu, generator on CPU $load_cpu; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  if ((r % 2 == 1)); then
    one before "$before"
    one after "$after"
  else
    one after "$after"
    one before "$before"
  fi
done
python3 - "$dir/costs" <<'EOF'
import statistics, sys
cost = {"before": [], "after": []}
for line in open(sys.argv[1]):
    label, ns = line.split()
    cost[label].append(float(ns))
ratios = [a / b for a, b in zip(cost["after"], cost["before"])]
print(f"closed_loop_ab: sluiced ns per acquire, after / before, by round: "
      f"{' '.join(f'{r:.3f}' for r in ratios)}; median {statistics.median(ratios):.3f}, "
      f"after lower in {sum(r < 1 for r in ratios)} of {len(ratios)}")
EOF
