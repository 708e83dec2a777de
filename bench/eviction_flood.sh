#!/usr/bin/env bash
# Issue 12, measured on a real sluiced: a flood of fresh keys at the memory cap must not make
# the server forget the keys it is denying.
#
# Starts sluiced (127.0.0.1, free ports, one shard, --max-memory 64MiB) pinned with taskset to
# one core, exhausts TARGETS keys of 5 per hour (the five algorithms in turn) with sluicectl,
# then floods it from another core with `sluice-load --dist seq` (fresh keys, one request each,
# under a token bucket of 100 an hour) for FLOOD_SECONDS, and meanwhile checks every target
# every CHECK_EVERY seconds with `sluicectl acquire`. Every check should be denied; the last
# lines say how many were allowed (wrongly: nothing refills within the run) and what STATS
# counted. Stops everything it started.
#
# Environment:
#   BUILD_DIR      where sluiced, sluicectl and sluice-load are built (default build; the three
#                  targets are built there first if the folder is configured)
#   MAX_MEMORY     sluiced --max-memory (default 64MiB)
#   FLOOD_SECONDS  length of the flood (default 60)
#   CHECK_EVERY    seconds between two rounds of checks (default 10)
#   TARGETS        exhausted keys checked in each round (default 30)
#   SERVER_CPU     core for sluiced (default 0)
#   LOAD_CPU       core for sluice-load and sluicectl (default 1)
set -Eeuo pipefail
trap 'echo "eviction_flood: error: line $LINENO failed: $BASH_COMMAND" >&2' ERR

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
MAX_MEMORY="${MAX_MEMORY:-64MiB}"
FLOOD_SECONDS="${FLOOD_SECONDS:-60}"
CHECK_EVERY="${CHECK_EVERY:-10}"
TARGETS="${TARGETS:-30}"
SERVER_CPU="${SERVER_CPU:-0}"
LOAD_CPU="${LOAD_CPU:-1}"
ALGORITHMS=(fixed_window sliding_window token_bucket gcra sliding_log)

log() { echo "eviction_flood: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}
is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }
is_uint "$FLOOD_SECONDS" && ((FLOOD_SECONDS >= 1)) || die "FLOOD_SECONDS must be a whole number >= 1"
is_uint "$CHECK_EVERY" && ((CHECK_EVERY >= 1)) || die "CHECK_EVERY must be a whole number >= 1"
is_uint "$TARGETS" && ((TARGETS >= 1)) || die "TARGETS must be a whole number >= 1"
command -v taskset >/dev/null || die "taskset is missing: install util-linux"
command -v python3 >/dev/null || die "python3 is missing"

if [[ -f "$BUILD_DIR/build.ninja" || -f "$BUILD_DIR/Makefile" ]]; then
  cmake --build "$BUILD_DIR" -j2 --target sluiced sluicectl sluice-load >&2 ||
    die "could not build sluiced, sluicectl and sluice-load in $BUILD_DIR"
fi
SLUICED="$BUILD_DIR/bin/sluiced"
CTL="$BUILD_DIR/bin/sluicectl"
LOAD="$BUILD_DIR/bin/sluice-load"
for bin in "$SLUICED" "$CTL" "$LOAD"; do [[ -x "$bin" ]] || die "$bin is not built"; done

WORK="$(mktemp -d)"
SLUICE_PID=""
FLOOD_PID=""
# free_ports N, listening PORT PID, stop_pids PID...
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
cleanup() {
  # shellcheck disable=SC2086 # either may be empty, and is then no word
  stop_pids $FLOOD_PID $SLUICE_PID
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

awk '{ exit !($1 > 1) }' /proc/loadavg &&
  log "warning: load average $(cut -d' ' -f1-3 /proc/loadavg): other work shares the cores"

# A fixed window of an hour starts afresh on the hour, which would rightly allow a target:
# start after the hour if it would fall within the run (exhausting, flood and last checks).
RUN_SECONDS=$((FLOOD_SECONDS + 60))
LEFT=$((3600 - $(date +%s) % 3600))
if ((LEFT < RUN_SECONDS)); then
  log "waiting ${LEFT}s for the hour to turn, so that no window starts during the run"
  sleep $((LEFT + 1))
fi

for attempt in 1 2 3; do
  PORT="$(free_ports 2)" # the public port and the one shard's
  taskset -c "$SERVER_CPU" "$SLUICED" --bind 127.0.0.1 --port "$PORT" --shards 1 \
    --max-memory "$MAX_MEMORY" --idle-timeout 0 >"$WORK/sluiced.log" 2>&1 &
  SLUICE_PID=$!
  listening "$PORT" "$SLUICE_PID" && break
  log "sluiced did not start on port $PORT (try $attempt): $(tail -c 300 "$WORK/sluiced.log")"
  kill "$SLUICE_PID" 2>/dev/null || true
  wait "$SLUICE_PID" 2>/dev/null || true
  SLUICE_PID=""
done
[[ -n "$SLUICE_PID" ]] || die "sluiced did not start"
log "$(head -n 1 "$WORK/sluiced.log")"

CTL_RUN=(taskset -c "$LOAD_CPU" "$CTL" --servers "127.0.0.1:$PORT" --timeout 5s)
# acquire T: one request for target T; prints sluicectl's exit status (0 allowed, 1 denied).
acquire() {
  local t="$1" rc=0
  "${CTL_RUN[@]}" acquire "evict-target:$t" --algorithm "${ALGORITHMS[t % ${#ALGORITHMS[@]}]}" \
    --limit 5 --period 1h >/dev/null 2>>"$WORK/sluicectl.err" || rc=$?
  echo "$rc"
}

for ((t = 0; t < TARGETS; ++t)); do
  for n in 1 2 3 4 5; do
    [[ "$(acquire "$t")" == 0 ]] || die "target $t: request $n of 5 was not allowed"
  done
  [[ "$(acquire "$t")" == 1 ]] || die "target $t: the sixth request was not denied"
done
log "$TARGETS targets exhausted (5 per hour; ${ALGORITHMS[*]} in turn)"

FLOOD=(--backend sluice --servers "127.0.0.1:$PORT" --dist seq --keys 1000000000 --threads 1
  --connections 8 --depth 4 --batch 256 --algorithm token_bucket --limit 100 --period 1h
  --duration "${FLOOD_SECONDS}s")
log "flood: sluice-load ${FLOOD[*]}"
taskset -c "$LOAD_CPU" "$LOAD" -q --json "${FLOOD[@]}" >"$WORK/flood.json" 2>"$WORK/flood.err" &
FLOOD_PID=$!
START=$(date +%s%N)

CHECKS=0
ALLOWED=0
ERRORS=0
for ((round = 1; round * CHECK_EVERY <= FLOOD_SECONDS; ++round)); do
  # Sleep until `round * CHECK_EVERY` seconds after the flood started.
  WAIT_NS=$((START + round * CHECK_EVERY * 1000000000 - $(date +%s%N)))
  ((WAIT_NS <= 0)) || sleep "$(printf '%d.%09d' $((WAIT_NS / 1000000000)) $((WAIT_NS % 1000000000)))"
  kill -0 "$FLOOD_PID" 2>/dev/null || die "the flood ended early: $(tail -c 300 "$WORK/flood.err")"
  round_allowed=0
  for ((t = 0; t < TARGETS; ++t)); do
    rc="$(acquire "$t")"
    ((++CHECKS))
    case "$rc" in
      0) ((++round_allowed)) ;;
      1) ;;
      *) ((++ERRORS)) ;;
    esac
  done
  ALLOWED=$((ALLOWED + round_allowed))
  log "t=$((round * CHECK_EVERY))s: $round_allowed of $TARGETS checks allowed"
done

rc=0
wait "$FLOOD_PID" || rc=$?
FLOOD_PID=""
((rc == 0)) || log "sluice-load ended with status $rc: $(tail -c 300 "$WORK/flood.err")"
"${CTL_RUN[@]}" stats --json >"$WORK/stats.json" || die "STATS failed"

python3 - "$WORK/flood.json" "$WORK/stats.json" "$CHECKS" "$ALLOWED" "$ERRORS" "$MAX_MEMORY" <<'EOF'
import json, sys
flood = json.load(open(sys.argv[1]))
total = json.load(open(sys.argv[2]))["total"]
checks, allowed, errors, cap = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
# Named evicted_lru before eviction ranked by remaining capacity.
evicted = total.get("evicted", total.get("evicted_lru", 0))
print(f"flood: {flood['sent']} fresh keys in {flood['duration_s']:.1f} s "
      f"({flood['throughput_per_s']:.0f}/s), {flood['errors']} errors; "
      f"table: {total['keys']} keys, {total['memory_bytes']} bytes at --max-memory {cap}, "
      f"{evicted} evicted, {total['failed_inserts']} failed inserts")
print(f"exhausted keys wrongly allowed: {allowed} of {checks} checks"
      + (f" ({errors} checks failed with an error)" if errors else ""))
EOF
((ERRORS == 0)) || exit 1
