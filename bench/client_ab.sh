#!/usr/bin/env bash
# Two builds of the client side by side: W2 (50 connections, depth 16, batch 1, token bucket
# 100/s over 1,000,000 keys) from sluice-load binary A and from binary B against the same
# sluiced, each against a node outside any cluster and against the same node as a one-node
# cluster (a cluster file listing only it, so every acquire takes the cluster path).
#
#   bench/client_ab.sh OLD_SLUICE_LOAD NEW_SLUICE_LOAD
#
# sluiced (from BUILD_DIR, default build) runs on COMPARE_SERVER_CPU (default 0) and the
# generator on COMPARE_LOAD_CPU (default 1). Each round runs the four combinations in turn on
# fresh nodes, COMPARE_SECONDS (default 10) each, AB_ROUNDS (default 3) rounds; it prints every
# run and the median of B/A per mode. Nothing is written to the docs: the caller quotes it.
set -Eeuo pipefail
trap 'echo "client_ab: error: line $LINENO failed: $BASH_COMMAND" >&2' ERR

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECS="${COMPARE_SECONDS:-10}"
ROUNDS="${AB_ROUNDS:-3}"
SERVER_CPU="${COMPARE_SERVER_CPU:-0}"
LOAD_CPU="${COMPARE_LOAD_CPU:-1}"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
SLUICED="$BUILD_DIR/bin/sluiced"

log() { echo "client_ab: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}
(($# == 2)) || die "usage: bench/client_ab.sh OLD_SLUICE_LOAD NEW_SLUICE_LOAD"
for bin in "$1" "$2" "$SLUICED"; do [[ -x "$bin" ]] || die "$bin is not an executable"; done
[[ "$SECS" =~ ^[0-9]+$ ]] && ((SECS >= 1)) || die "COMPARE_SECONDS must be >= 1"
[[ "$ROUNDS" =~ ^[0-9]+$ ]] && ((ROUNDS >= 1)) || die "AB_ROUNDS must be >= 1"
LOADS=("$1" "$2")

WORK="$(mktemp -d /tmp/sluice-client-ab.XXXXXX)"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
cleanup() {
  stop_pids "${PIDS[@]}"
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# run MODE WHICH N: one run of binary WHICH (0 = A, 1 = B) against a fresh node in MODE
# (plain or cluster); appends "MODE WHICH N throughput errors" to runs.txt.
run() {
  local mode="$1" which="$2" n="$3" port pid cluster=()
  port="$(free_ports 2)"
  if [[ "$mode" == cluster ]]; then
    printf 'epoch 1\nA 127.0.0.1:%s\n' "$port" >"$WORK/cluster.conf"
    cluster=(--cluster "$WORK/cluster.conf" --node-id A)
  fi
  start_sluiced "$WORK/node.log" "$port" "$SERVER_CPU" --shards 1 --max-memory 1GiB \
    --idle-timeout 0 --huge-pages "${cluster[@]}" ||
    die "sluiced did not start: $(tail -c 300 "$WORK/node.log")"
  pid="$STARTED_PID"
  taskset -c "$LOAD_CPU" "${LOADS[$which]}" -q --json --backend sluice \
    --servers "127.0.0.1:$port" --connections 50 --keys 1000000 --depth 16 --batch 1 \
    --limit 100 --period 1s --duration "${SECS}s" >"$WORK/run.json" ||
    log "sluice-load ended with status $? ($mode, binary $which)"
  python3 - "$WORK/run.json" "$mode" "$which" "$n" >>"$WORK/runs.txt" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(sys.argv[2], sys.argv[3], sys.argv[4], int(r["throughput_per_s"]), r["errors"])
EOF
  stop_pid "$pid"
}

for n in $(seq 1 "$ROUNDS"); do
  log "round $n of $ROUNDS: plain A, plain B, cluster A, cluster B (${SECS} s each)"
  for mode in plain cluster; do
    run "$mode" 0 "$n"
    run "$mode" 1 "$n"
  done
done

python3 - "$WORK/runs.txt" "$1" "$2" "$SERVER_CPU" "$LOAD_CPU" "$SECS" <<'EOF'
import statistics, sys
runs = [line.split() for line in open(sys.argv[1])]
names = {"0": "A " + sys.argv[2], "1": "B " + sys.argv[3]}
print(f"sluiced on CPU {sys.argv[4]}, sluice-load on CPU {sys.argv[5]}, {sys.argv[6]} s a run; "
      f"W2: 50 connections, depth 16, batch 1, token bucket 100/s over 1,000,000 keys")
print("| mode | round | A /s | B /s | B/A | errors A | errors B |")
print("|---|---|---|---|---|---|---|")
for mode in ("plain", "cluster"):
    ratios = []
    for n in sorted({r[2] for r in runs}, key=int):
        a = next(r for r in runs if r[0] == mode and r[1] == "0" and r[2] == n)
        b = next(r for r in runs if r[0] == mode and r[1] == "1" and r[2] == n)
        ratio = int(b[3]) / int(a[3]) if int(a[3]) else 0.0
        ratios.append(ratio)
        print(f"| {mode} | {n} | {int(a[3]):,} | {int(b[3]):,} | {ratio:.3f} | {a[4]} | {b[4]} |")
    print(f"{mode}: median B/A {statistics.median(ratios):.3f}")
for k, v in names.items():
    print(v)
EOF
