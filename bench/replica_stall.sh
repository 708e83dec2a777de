#!/usr/bin/env bash
# A replica that is connected but does not read (issue 23): two sluiced nodes A and B in one
# static cluster file, B SIGSTOPped after a 1 s warm-up (so A's replication links to it are up),
# then W2-like load (closed loop, 50 connections, 16 in flight each, 1 decision per request)
# on A's keys only (--only-node A) for STALL_SECONDS. A's resident memory is read from
# /proc/PID/status (VmRSS) before and after, A's replication counters from its STATS; then B is
# resumed and the time until A has nothing left unacknowledged is measured.
#
# Each build named runs the same scenario, one after the other, on fresh nodes:
#   bench/replica_stall.sh LABEL=BIN_DIR [LABEL=BIN_DIR ...]
# where BIN_DIR holds that build's sluiced and sluice-load (e.g. before=/tmp/main-src/build/bin
# after=build/bin). STATS are read with sluicectl from the first BIN_DIR that has one. A runs on
# STALL_SERVER_CPU (default 0), B and sluice-load on STALL_LOAD_CPU (default 1).
set -Eeuo pipefail
trap 'echo "replica_stall: error: line $LINENO failed: $BASH_COMMAND" >&2' ERR

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECS="${STALL_SECONDS:-12}"
SHARDS="${STALL_SHARDS:-2}"
SERVER_CPU="${STALL_SERVER_CPU:-0}"
LOAD_CPU="${STALL_LOAD_CPU:-1}"

log() { echo "replica_stall: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}
(($# >= 1)) || die "usage: $0 LABEL=BIN_DIR [LABEL=BIN_DIR ...]"
CTL=""
for spec in "$@"; do
  dir="${spec#*=}"
  [[ -x "$dir/sluiced" && -x "$dir/sluice-load" ]] || die "$dir has no sluiced and sluice-load"
  [[ -z "$CTL" && -x "$dir/sluicectl" ]] && CTL="$dir/sluicectl"
done
[[ -n "$CTL" ]] || die "no sluicectl in any BIN_DIR given"

WORK="$(mktemp -d /tmp/sluice-replica-stall.XXXXXX)"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
cleanup() {
  for pid in "${PIDS[@]}"; do kill -CONT "$pid" 2>/dev/null || true; done
  stop_pids "${PIDS[@]}"
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# stat PORT NAME: one STATS entry of the node on PORT ("total.X" or "replication.B.X"; "-"
# when it has none).
stat() {
  "$CTL" --servers "127.0.0.1:$1" --json stats 2>/dev/null | python3 -c '
import json, sys
s, name = json.load(sys.stdin), sys.argv[1]
v = s["total"].get(name[6:]) if name.startswith("total.") else s["other"].get(name)
print("-" if v is None else v)' "$2" || echo "-"
}

results=()
for spec in "$@"; do
  label="${spec%%=*}"
  # shellcheck disable=SC2034 # start_sluiced (bench/lib.sh) runs $SLUICED
  SLUICED="${spec#*=}/sluiced"
  LOAD="${spec#*=}/sluice-load"
  a_port="$(free_ports $((SHARDS + 1)))"
  b_port="$(free_ports $((SHARDS + 1)))"
  file="$WORK/cluster-$label.conf"
  printf 'epoch 1\nA 127.0.0.1:%s\nB 127.0.0.1:%s\n' "$a_port" "$b_port" >"$file"
  start_sluiced "$WORK/$label-A.log" "$a_port" "$SERVER_CPU" --shards "$SHARDS" \
    --max-memory 1GiB --idle-timeout 0 --cluster "$file" --node-id A ||
    die "sluiced A ($label) did not start: $(tail -c 300 "$WORK/$label-A.log")"
  pid_a="$STARTED_PID"
  start_sluiced "$WORK/$label-B.log" "$b_port" "$LOAD_CPU" --shards "$SHARDS" \
    --max-memory 1GiB --idle-timeout 0 --cluster "$file" --node-id B ||
    die "sluiced B ($label) did not start: $(tail -c 300 "$WORK/$label-B.log")"
  pid_b="$STARTED_PID"
  load=(taskset -c "$LOAD_CPU" "$LOAD" -q --json --backend sluice --servers "127.0.0.1:$a_port"
    --connections 50 --keys 2000000 --depth 16 --batch 1 --limit 100 --period 1s --only-node A)
  "${load[@]}" --duration 1s >"$WORK/$label-warm.json" || die "warm-up load failed ($label)"
  sleep 0.5
  rss0="$(rss_kib "$pid_a")"
  kill -STOP "$pid_b"
  stopped_at="$(date +%s%N)"
  log "$label: B stopped, ${SECS}s of load on A"
  "${load[@]}" --duration "${SECS}s" >"$WORK/$label-stall.json" || die "load failed ($label)"
  rss1="$(rss_kib "$pid_a")"
  sleep 0.3 # a fresh STATS snapshot (rebuilt every 100 ms)
  # sluice-load lists A's keys before its clock starts: B is stopped longer than the load runs.
  stopped_ms="$((($(date +%s%N) - stopped_at) / 1000000))"
  requests="$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print("%d requests (%.0f/s)" % (r["sent"], r["throughput_per_s"]))' \
    "$WORK/$label-stall.json" 2>/dev/null || echo "- requests")"
  records="$(stat "$a_port" replication.B.records)"
  bytes="$(stat "$a_port" replication.B.bytes)"
  dropped="$(stat "$a_port" total.replication_dropped)"
  lag="$(stat "$a_port" replication.B.lag_ms)"
  kill -CONT "$pid_b"
  t0="$(date +%s%N)"
  caught="-"
  for _ in $(seq 1 600); do
    if [[ "$(stat "$a_port" replication.B.records)" == 0 ]]; then
      caught="$((($(date +%s%N) - t0) / 1000000))"
      break
    fi
    sleep 0.1
  done
  rss2="$(rss_kib "$pid_a")"
  line="$(printf '%-8s B stopped %d ms; A RSS %d -> %d MiB; %s; unacked %s records, %s bytes, oldest %s ms; dropped %s; after SIGCONT: nothing unacked in %s ms, A RSS %d MiB' \
    "$label" "$stopped_ms" $((rss0 / 1024)) $((rss1 / 1024)) "$requests" "$records" "$bytes" \
    "$lag" "$dropped" "$caught" $((rss2 / 1024)))"
  results+=("$line")
  log "$line"
  grep -h "replica B" "$WORK/$label-A.log" | sed "s/^/replica_stall: $label: A's log: /" >&2 || true
  stop_pids "$pid_a" "$pid_b"
  PIDS=()
done
echo "== $(date -u +%FT%TZ) $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "replica stall: ${SECS}s of W2-like load (50 connections x 16, 2M keys, --only-node A) on A, B SIGSTOPped; A on CPU $SERVER_CPU, B and sluice-load on CPU $LOAD_CPU, $SHARDS shards each"
printf '%s\n' "${results[@]}"
