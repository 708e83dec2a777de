#!/usr/bin/env bash
# Two sluice-gateway binaries side by side on the RLS front: for each round, each binary in turn
# is started (pinned to SERVER_CPU with a one-shard sluiced) and driven by sluice-load --backend
# rls with 3 descriptors, closed loop then open loop at RATE, after a warm-up; prints one line
# per run with throughput, p50/p99/p99.9 and the gateway's CPU per call (its utime + stime over
# the run, from /proc). Used to keep the change that proved a win (docs/BENCHMARKS.md).
# Usage: bench/rls_ab.sh BEFORE_BINARY AFTER_BINARY [ROUNDS]
# Environment: RATE (10000), SECONDS_EACH (6), SERVER_CPU (1), LOAD_CPU (0), BUILD_DIR (build),
# RLS_DOMAIN (bench: every descriptor has a limit; any other name is a domain the config lacks,
# answered OK without the cluster, so the run measures the gRPC front alone), LOAD_FLAGS (extra
# sluice-load flags for every run, e.g. --busy-poll).
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?usage: bench/rls_ab.sh BEFORE_BINARY AFTER_BINARY [ROUNDS]}
after=${2:?usage: bench/rls_ab.sh BEFORE_BINARY AFTER_BINARY [ROUNDS]}
rounds=${3:-2}
rate=${RATE:-10000}
secs=${SECONDS_EACH:-6}
server_cpu=${SERVER_CPU:-1}
load_cpu=${LOAD_CPU:-0}
bin=${BUILD_DIR:-build}/bin
domain=${RLS_DOMAIN:-bench}
load_flags=${LOAD_FLAGS:-}
# shellcheck source=bench/lib.sh
source bench/lib.sh
dir=$(mktemp -d /tmp/sluice-rls-ab.XXXXXX)
cleanup() {
  stop_pids "${PIDS[@]}"
  rm -rf "$dir"
}
trap cleanup EXIT
rls_bench_config "$dir/bench.yaml"

one() { # LABEL BINARY
  local label=$1 gateway=$2 port s g t0 t1 t2
  port=$(free_ports 5)
  taskset -c "$server_cpu" "$bin/sluiced" --port "$port" --shards 1 --max-memory 1GiB \
    --idle-timeout 0 >"$dir/sluiced.log" 2>&1 &
  s=$!
  PIDS+=("$s")
  listening "$port" "$s" || { cat "$dir/sluiced.log" >&2; exit 1; }
  taskset -c "$server_cpu" "$gateway" --listen "127.0.0.1:$((port + 3))" \
    --grpc-listen "127.0.0.1:$((port + 4))" --servers "127.0.0.1:$port" \
    --rules "$dir/bench.yaml" --failure-policy closed >"$dir/gateway.log" 2>&1 &
  g=$!
  PIDS+=("$g")
  listening "$((port + 4))" "$g" || { cat "$dir/gateway.log" >&2; exit 1; }
  local load=(taskset -c "$load_cpu" "$bin/sluice-load" -q --json --keys 100000 --connections 4
    --depth 16 --algorithm fixed_window --limit 1000000 --period 1s --backend rls
    --servers "127.0.0.1:$((port + 4))" --descriptors 3 --rls-domain "$domain" $load_flags)
  "${load[@]}" --duration 2s >/dev/null
  t0=$(cpu_ticks "$g")
  "${load[@]}" --duration "${secs}s" >"$dir/closed.json" || true
  t1=$(cpu_ticks "$g")
  "${load[@]}" --duration "${secs}s" --rate "$rate" >"$dir/open.json" || true
  t2=$(cpu_ticks "$g")
  python3 - "$label" "$dir" "$t0" "$t1" "$t2" "$(getconf CLK_TCK)" <<'PY'
import json, sys
label, d = sys.argv[1], sys.argv[2]
t0, t1, t2, hz = map(int, sys.argv[3:7])
for name, a, b in (("closed", t0, t1), ("open", t1, t2)):
    r = json.load(open(f"{d}/{name}.json"))
    l = r["latency_us"]
    calls = r["throughput_per_s"] * r["duration_s"]
    print(f"{label:<8} {name:<6} {r['throughput_per_s']:9.0f}/s p50 {l['p50']:5d} p99 {l['p99']:6d}"
          f" p99.9 {l['p999']:6d} us  gateway CPU per call {(b - a) * 1e6 / hz / calls:5.1f} us"
          f"  errors {r['errors']}")
PY
  stop_pid "$g"
  stop_pid "$s"
}

echo "rls_ab: 3 descriptors in domain $domain, closed loop and open loop at $rate/s, ${secs} s" \
  "each; servers on CPU $server_cpu, sluice-load on CPU $load_cpu${load_flags:+ ($load_flags)};" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$rounds"); do
  one before "$before"
  one after "$after"
done
