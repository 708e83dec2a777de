#!/usr/bin/env bash
# Whose tail is W4's (issue 27)? Side by side in one run, ROUNDS times, each at RATE per second
# over CONNECTIONS connections for SECONDS_EACH seconds in an open loop, the server pinned to
# SERVER_CPU and the generator to LOAD_CPU, neither ever sleeping:
#   plain   bench/tail_probe.cpp: an epoll echo server and an open-loop sender of 16-byte
#           messages, no Sluice in either (the machine's own tail);
#   probe   the same sender against a one-shard sluiced --busy-poll (its messages are PING
#           frames): sluiced's part without sluice-load's;
#   ping    sluice-load --op ping against the same sluiced (the transport of both Sluice
#           programs);
#   acquire sluice-load acquires against the same sluiced, W4's rule (100 per second).
# Prints one line per run (p50, p99, p99.9, max in microseconds) and each round's ratios of
# ping and plain to each other. docs/BENCHMARKS.md, "Whose tail", keeps the latest full run.
# Usage: bench/tail_control.sh [ROUNDS]
# Environment: RATE (30000), CONNECTIONS (50), SECONDS_EACH (10), SERVER_CPU (1), LOAD_CPU (0),
# BUILD_DIR (build).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
source bench/lib.sh
rounds=${1:-3}
rate=${RATE:-30000}
conns=${CONNECTIONS:-50}
secs=${SECONDS_EACH:-10}
server_cpu=${SERVER_CPU:-1}
load_cpu=${LOAD_CPU:-0}
build=${BUILD_DIR:-build}
LOAD="$build/bin/sluice-load"
SLUICED="$build/bin/sluiced"
dir=$(mktemp -d /tmp/sluice-tail.XXXXXX)
cleanup() {
  stop_pids "${PIDS[@]}"
  rm -rf "$dir"
}
trap cleanup EXIT
die() {
  echo "tail_control: $*" >&2
  exit 1
}

ninja -C "$build" sluice-load sluiced >/dev/null || die "build failed in $build"
g++ -O2 -std=c++20 -Wall -Wextra -o "$dir/tail_probe" bench/tail_probe.cpp ||
  die "cannot build bench/tail_probe.cpp"

echo "commit $(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo '?'), load average" \
  "$(cut -d' ' -f1-3 /proc/loadavg), rate ${rate}/s, $conns connections, ${secs} s a run," \
  "server on CPU $server_cpu, generator on CPU $load_cpu"
printf '%-8s %5s %10s %9s %9s %9s %9s\n' run round answered p50_us p99_us p99.9_us max_us

# line NAME ROUND P50 P99 P999 MAX ANSWERED
line() { printf '%-8s %5s %10s %9.0f %9.0f %9.0f %9.0f\n' "$1" "$2" "$7" "$3" "$4" "$5" "$6"; }

# probe_load PORT OUT WHAT: tail_probe's sender against PORT, its JSON in OUT; a run that lost
# replies stops the script (the trap stops the servers).
probe_load() {
  taskset -c "$load_cpu" "$dir/tail_probe" load "$1" "$rate" "$conns" "$secs" >"$2" ||
    die "the $3 lost replies: $(cat "$2")"
}

# probe_figures OUT: "p50 p99 p999 max answered" of a probe_load run.
probe_figures() {
  python3 - "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(r["p50_us"], r["p99_us"], r["p999_us"], r["max_us"], r["answered"])
EOF
}

# start_one_shard: a one-shard sluiced --busy-poll on the server's CPU; its port in PORT, its
# pid in STARTED_PID.
start_one_shard() {
  PORT=$(free_ports 2)
  start_sluiced "$dir/sluiced.log" "$PORT" "$server_cpu" --shards 1 --max-memory 1GiB \
    --idle-timeout 0 --busy-poll || die "sluiced did not start: $(tail -c 300 "$dir/sluiced.log")"
}

plain_run() { # ROUND: prints "p50 p99 p999 max answered"
  local port pid
  port=$(free_ports 1)
  taskset -c "$server_cpu" "$dir/tail_probe" serve "$port" &
  pid=$!
  PIDS+=("$pid")
  listening "$port" "$pid" || die "tail_probe did not listen"
  probe_load "$port" "$dir/plain_$1.json" "plain run of round $1"
  stop_pid "$pid"
  probe_figures "$dir/plain_$1.json"
}

probe_sluiced_run() { # ROUND: the plain sender against sluiced; prints as plain_run
  start_one_shard
  local pid=$STARTED_PID
  probe_load "$PORT" "$dir/probe_$1.json" "probe run against sluiced of round $1"
  stop_pid "$pid"
  probe_figures "$dir/probe_$1.json"
}

sluice_run() { # ROUND OP: prints "p50 p99 p999 max answered"
  local out rc=0
  start_one_shard
  local pid=$STARTED_PID
  out="$dir/$2_$1.json"
  taskset -c "$load_cpu" "$LOAD" -q --json --backend sluice --servers "127.0.0.1:$PORT" \
    --connections "$conns" --keys 1000000 --limit 100 --period 1s --busy-poll \
    --duration "${secs}s" --rate "$rate" --op "$2" >"$out" || rc=$?
  stop_pid "$pid"
  ((rc == 0)) || die "sluice-load --op $2 ended with status $rc: $(tail -c 300 "$out")"
  python3 - "$out" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
lat = r.get("latency_us") or {}
if not lat.get("p99"):
    sys.exit("no latency in " + sys.argv[1])
if r.get("errors") or r.get("behind"):
    sys.exit(f"errors {r.get('errors')}, behind {r.get('behind')} in " + sys.argv[1])
print(lat["p50"], lat["p99"], lat["p999"], lat["max"], r["allowed"] + r["denied"])
EOF
}

# measure NAME ROUND FUNCTION ARGS...: runs FUNCTION in this shell (so that its die() stops the
# script and the trap stops what it started), prints its line; its p99 in P99.
measure() {
  "${@:3}" >"$dir/figures"
  local p50 p999 max n
  read -r p50 P99 p999 max n <"$dir/figures"
  line "$1" "$2" "$p50" "$P99" "$p999" "$max" "$n"
}

for round in $(seq 1 "$rounds"); do
  measure plain "$round" plain_run "$round"
  plain99=$P99
  measure probe "$round" probe_sluiced_run "$round"
  measure ping "$round" sluice_run "$round" ping
  ping99=$P99
  measure acquire "$round" sluice_run "$round" acquire
  python3 - "$round" "$plain99" "$ping99" "$P99" <<'EOF'
import sys
plain, ping, acquire = map(float, sys.argv[2:])
print(f"round {sys.argv[1]}: p99 ping/plain {ping / plain:.2f}, acquire/ping {acquire / ping:.2f}")
EOF
done
