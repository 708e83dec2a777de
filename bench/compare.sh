#!/usr/bin/env bash
# Sluice vs Redis on one machine, in one run, with the same load generator and the same traffic.
# The workloads, the method and the targets are in docs/BENCHMARKS.md.
#
# Starts redis-server and sluiced (127.0.0.1 only, free ports) pinned with taskset to one core,
# and runs sluice-load and redis-benchmark pinned to another: W1-W6 and W4T, the ping floor, W4's
# PING control and the INCR check. Prints a table that states for every target whether it was met.
#
# A full run (every length and key count at its default or more) writes bench/results/latest.json
# and replaces the generated section of docs/BENCHMARKS.md (between the compare.sh:begin and
# compare.sh:end markers). Any shorter run is a quick run: it writes bench/results/quick.json
# and stdout only, so the document always shows a full run. Stops everything it started.
#
# Environment:
#   COMPARE_SECONDS      seconds per throughput workload (default 10; less makes a quick run)
#   COMPARE_W4_SECONDS   length of each W4 open-loop round (default 10; less makes a quick run)
#   COMPARE_W4_MODE      own: each backend runs at COMPARE_W4_FRACTION of its own closed-loop
#                        capacity, measured first in the same run (default); common: both run at
#                        COMPARE_W4_FRACTION of the slower backend's capacity
#   COMPARE_W4_FRACTION  default 0.5
#   COMPARE_W5_KEYS      key counts of the memory workload, the same for both backends (default
#                        "1000000 10000000"; without 10000000 the run is a quick run)
#   COMPARE_SHARDS       sluiced --shards (default 1: one shard on one core, as Redis executes
#                        commands on one thread)
#   COMPARE_SERVER_CPU   core for redis-server and sluiced (default 0)
#   COMPARE_LOAD_CPU     core for sluice-load and redis-benchmark (default 1)
#   BUILD_DIR            where sluiced and sluice-load are built (default build-bench,
#                        RelWithDebInfo; rebuilt incrementally on every run)
set -Eeuo pipefail
trap 'echo "compare: error: line $LINENO failed: $BASH_COMMAND" >&2' ERR

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECS="${COMPARE_SECONDS:-10}"
W4_SECS="${COMPARE_W4_SECONDS:-10}"
W4_MODE="${COMPARE_W4_MODE:-own}"
W4_FRACTION="${COMPARE_W4_FRACTION:-0.5}"
W5_DEFAULT="1000000 10000000"
W5_KEYS="${COMPARE_W5_KEYS:-$W5_DEFAULT}"
SHARDS="${COMPARE_SHARDS:-1}"
SERVER_CPU="${COMPARE_SERVER_CPU:-0}"
LOAD_CPU="${COMPARE_LOAD_CPU:-1}"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-bench}"
OUT_DIR="$ROOT/bench/results"
DOC="$ROOT/docs/BENCHMARKS.md"
CONNS=50
KEYS=1000000

log() { echo "compare: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }
is_uint "$SECS" && ((SECS >= 1)) || die "COMPARE_SECONDS must be a whole number of seconds >= 1"
is_uint "$W4_SECS" && ((W4_SECS >= 1)) || die "COMPARE_W4_SECONDS must be a whole number >= 1"
[[ "$W4_MODE" == own || "$W4_MODE" == common ]] || die "COMPARE_W4_MODE must be own or common"
[[ "$W4_FRACTION" =~ ^(0?\.[0-9]+|1(\.0*)?)$ ]] && [[ ! "$W4_FRACTION" =~ ^0?\.0*$ ]] ||
  die "COMPARE_W4_FRACTION must be in (0, 1]"
is_uint "$SHARDS" && ((SHARDS >= 1)) || die "COMPARE_SHARDS must be >= 1"
for n in $W5_KEYS; do is_uint "$n" && ((n >= 1)) || die "COMPARE_W5_KEYS: '$n' is not a count"; done

FULL=1
((SECS >= 10 && W4_SECS >= 10)) || FULL=0
[[ " $W5_KEYS " == *" 10000000 "* ]] || FULL=0
if ((FULL)); then RESULT="$OUT_DIR/latest.json"; else RESULT="$OUT_DIR/quick.json"; fi

# Tools. redis-server and redis-benchmark come from Debian through tools/deps.sh.
if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
  log "installing redis-server and redis-tools"
  "$ROOT/tools/deps.sh" redis-server redis-tools ||
    die "could not install redis-server and redis-tools (tools/deps.sh)"
fi
need() { command -v "$1" >/dev/null || die "'$1' is missing: $2"; }
need taskset "install util-linux"
need python3 "install python3"
need cmake "run tools/deps.sh"
need ninja "run tools/deps.sh"
need redis-server "run tools/deps.sh redis-server redis-tools"
need redis-benchmark "run tools/deps.sh redis-server redis-tools"
CORES="$(nproc)"
for cpu in "$SERVER_CPU" "$LOAD_CPU"; do
  is_uint "$cpu" && taskset -c "$cpu" true 2>/dev/null ||
    die "CPU '$cpu' cannot be used (this machine has $CORES; set COMPARE_SERVER_CPU and COMPARE_LOAD_CPU)"
done
[[ "$SERVER_CPU" != "$LOAD_CPU" ]] ||
  log "warning: servers and load generator share CPU $SERVER_CPU (recorded in the results)"
SRV=(taskset -c "$SERVER_CPU")
GEN=(taskset -c "$LOAD_CPU")

LOAD="$BUILD_DIR/bin/sluice-load"
SLUICED="$BUILD_DIR/bin/sluiced"
CTL="$BUILD_DIR/bin/sluicectl"
# Always (incrementally) build: stale binaries would measure old code.
log "building sluice-load, sluiced and sluicectl in $BUILD_DIR"
# No tests here: a benchmark directory registering tests it never builds would show ctest
# tests that do not run (tools/test.sh builds and runs them in build/).
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSLUICE_BUILD_TESTS=OFF >/dev/null
fi
ninja -C "$BUILD_DIR" -j2 sluice-load sluiced sluicectl >/dev/null || die "build failed in $BUILD_DIR"
# The code measured: the commit, and the files that differ from it, as built.
git_commit="not a git checkout"
git_dirty=""
if command -v git >/dev/null && git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
  git_commit="$(git -C "$ROOT" rev-parse --short=12 HEAD)"
  git_dirty="$(git -C "$ROOT" status --porcelain --untracked-files=no | awk '{print $NF}' |
    paste -sd' ')"
fi

WORK="$(mktemp -d /tmp/sluice-compare.XXXXXX)"
START_EPOCH="$(date +%s)"
LOADAVG_START="$(cut -d' ' -f1-3 /proc/loadavg)"
# Other processes on the pinned cores skew every figure; the report states the load average.
awk -v cores="$CORES" '{ exit !($1 > 0.5 * cores) }' /proc/loadavg &&
  log "warning: load average $LOADAVG_START on $CORES cores: other work will skew the figures"

# free_ports N, listening PORT PID, and PIDS (every process started here, until it is seen to
# exit) with untrack, stop_pid and stop_pids.
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
# The traps only turn a signal into an exit, so cleanup runs once, from EXIT.
cleanup() {
  stop_pids "${PIDS[@]}"
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The cores every thread of PID may run on, as the kernel reports them, for the results.
note_affinity() {
  local role="$1" pid="$2" cpus
  # taskset sets the affinity and then execs: wait until it has (at most 1 s).
  for _ in $(seq 1 100); do
    [[ "$(cat /proc/"$pid"/comm 2>/dev/null)" == taskset ]] || break
    sleep 0.01
  done
  # A thread may exit between the glob and cat: whatever was read is enough.
  cpus="$( (cat /proc/"$pid"/task/*/status 2>/dev/null || true) |
    awk '/^Cpus_allowed_list:/ {print $2}' | sort -u | paste -sd' ')"
  echo "$role ${cpus:-gone}" >>"$WORK/affinity.txt"
}


REDIS_PID=""
SLUICE_PID=""
start_redis() {
  REDIS_PORT="$(free_ports 1)"
  "${SRV[@]}" redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
    --daemonize no --protected-mode yes --dir "$WORK" >"$WORK/redis.log" 2>&1 &
  REDIS_PID=$!
  PIDS+=("$REDIS_PID")
  listening "$REDIS_PORT" "$REDIS_PID" || die "redis-server did not start: $(tail -c 300 "$WORK/redis.log")"
  note_affinity redis-server "$REDIS_PID"
}
start_sluice() {
  # Shard ports are P+1+i for --port P (HELLO tells them). They are free when picked, but
  # another listener may take one before sluiced binds it, and then sluiced exits: up to three
  # tries, each on new ports.
  for attempt in 1 2 3; do
    SLUICE_PORT="$(free_ports $((SHARDS + 1)))"
    "${SRV[@]}" "$SLUICED" --bind 127.0.0.1 --port "$SLUICE_PORT" --shards "$SHARDS" \
      --max-memory "${1:-1GiB}" --idle-timeout 0 "${@:2}" >"$WORK/sluiced.log" 2>&1 &
    SLUICE_PID=$!
    PIDS+=("$SLUICE_PID")
    if listening "$SLUICE_PORT" "$SLUICE_PID"; then
      note_affinity sluiced "$SLUICE_PID"
      return 0
    fi
    log "sluiced did not start on port $SLUICE_PORT (try $attempt): $(tail -c 300 "$WORK/sluiced.log")"
    stop_pid "$SLUICE_PID"
  done
  die "sluiced did not start"
}

# run NAME ARGS...: one pinned sluice-load run, its JSON kept in $WORK/NAME.json.
run() {
  local name="$1" pid
  shift
  log "$name: $*"
  "${GEN[@]}" "$LOAD" -q --json --connections "$CONNS" "$@" >"$WORK/$name.json" &
  pid=$!
  PIDS+=("$pid")
  note_affinity sluice-load "$pid"
  local rc=0
  wait "$pid" || rc=$?
  untrack "$pid"
  # 1: the run had errors (counted in its JSON and in the report); 2: sluice-load refused a flag.
  ((rc != 2)) || die "sluice-load refused the flags of $name (exit status 2): $*"
  ((rc == 0)) || log "$name ended with errors (exit status $rc; see the report)"
}
S() { run "$1" --backend sluice --servers "127.0.0.1:$SLUICE_PORT" --keys "$KEYS" "${@:2}"; }
R() { run "$1" --backend redis --servers "127.0.0.1:$REDIS_PORT" --keys "$KEYS" "${@:2}"; }
tput_of() { # the throughput of a finished run; a run without one stops the script
  local value
  value=$(python3 -c "import json,sys; print(int(json.load(open(sys.argv[1])).get('throughput_per_s') or 0))" \
    "$WORK/$1.json") || die "cannot read the throughput of $1 from $WORK/$1.json"
  ((value > 0)) || die "$1 measured no throughput (see $WORK/$1.json)"
  echo "$value"
}

start_redis
# The throughput workloads run with counters in huge pages (sluiced --huge-pages); W4 and W5 run
# with the defaults, as a latency-minded or a memory-minded operator would.
start_sluice 1GiB --huge-pages
RULE=(--limit 100 --period 1s)
D=(--duration "${SECS}s")

# sluice_and_ping NAME SUFFIX ARGS...: the decision run and its ping floor at the same settings.
sluice_and_ping() {
  S "$1_sluice$2" "${D[@]}" "${@:3}" "${RULE[@]}"
  S "$1_ping$2" "${D[@]}" "${@:3}" --op ping
}

# redis_designs NAME SUFFIX ARGS...: Redis's Lua token bucket and its INCR window at the same
# settings.
redis_designs() {
  R "$1_redis_lua$2" "${D[@]}" "${@:3}" "${RULE[@]}" --redis-design lua_token_bucket
  R "$1_redis_incr_window$2" "${D[@]}" "${@:3}" --redis-design incr_window \
    --algorithm fixed_window "${RULE[@]}"
}

# W1: depth 1, batch 1. W2: depth 16. W3: batch 64.
W1="W1 --depth 1 --batch 1"
W2="W2 --depth 16 --batch 1"
W3="W3 --depth 1 --batch 64"
for w in "$W1" "$W2" "$W3"; do
  # shellcheck disable=SC2086
  set -- $w
  name="$1"
  shift
  sluice_and_ping "$name" "" "$@"
  redis_designs "$name" "" "$@"
done
# A single ratio moves with the host's load from one pair of runs to the next: W1 and W3 get
# two more alternating pairs each with their ping floor, W2 two more rounds of Sluice beside both
# Redis designs, and the median of the three ratios is judged.
for round in 2 3; do
  for w in "$W1" "$W2" "$W3"; do
    # shellcheck disable=SC2086
    set -- $w
    sluice_and_ping "$1" "_r$round" "${@:2}"
    if [[ "$1" == W2 ]]; then redis_designs "$1" "_r$round" "${@:2}"; fi
  done
done

# W4: latency in an open loop at a rate the backend can sustain: above its capacity the
# latency measured is the growth of a queue. Each backend's closed-loop capacity for W4's
# traffic (depth 1, batch 1) is measured first, with the same settings as its open-loop rounds.
# Nobody sleeps: sluiced runs with --busy-poll, sluice-load with --busy-poll for both backends
# (Redis has no such mode), so the wake-up latency of a sleeping thread stays out of the figures.
# Three rounds each (a fresh sluiced per round); the medians are judged.
stop_pid "$SLUICE_PID"
CAP_SECS=$((SECS < 4 ? SECS : 4))
start_sluice 1GiB --busy-poll
S W4_capacity_sluice --busy-poll --duration "${CAP_SECS}s" "${RULE[@]}"
stop_pid "$SLUICE_PID" # a polling shard would take a core from everything after it
R W4_capacity_redis_lua --busy-poll --duration "${CAP_SECS}s" "${RULE[@]}" \
  --redis-design lua_token_bucket
# Assigned first: a failed read stops the script here (a substitution inside the arguments of
# another command would not).
W4_CAP_SLUICE=$(tput_of W4_capacity_sluice)
W4_CAP_REDIS=$(tput_of W4_capacity_redis_lua)
read -r W4_RATE_SLUICE W4_RATE_REDIS < <(python3 - "$W4_CAP_SLUICE" \
  "$W4_CAP_REDIS" "$W4_FRACTION" "$W4_MODE" <<'EOF'
import sys
s, r, f, mode = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
if mode == "common":
    s = r = min(s, r)
print(int(s * f), int(r * f))
EOF
)
((W4_RATE_SLUICE > 0 && W4_RATE_REDIS > 0)) ||
  die "W4: no closed-loop capacity measured (sluice $W4_RATE_SLUICE/s, redis $W4_RATE_REDIS/s)"
log "W4 open-loop rates ($W4_MODE, fraction $W4_FRACTION): sluice $W4_RATE_SLUICE/s, redis $W4_RATE_REDIS/s"
echo "$W4_RATE_SLUICE $W4_RATE_REDIS $CAP_SECS" >"$WORK/w4_rates.txt"
# Every other request of a round is a PING frame of the same keys (--control-every 2): the
# control, whose latency is the transport's and the generator's (docs/BENCHMARKS.md, "Whose
# tail"), sent on the same connections in the same schedule as the acquires, so that both go
# through the same moments of the machine. The server sees W4's rate of requests; half of them
# are decisions.
w4_round() { # ROUND NAME RULE...: one open-loop run NAME_rROUND, acquires and their control
  local round="$1" name="$2"
  shift 2
  S "${name}_r$round" --busy-poll --duration "${W4_SECS}s" --rate "$W4_RATE_SLUICE" \
    --control-every 2 "$@"
}
# stored_keys NAME: the keys sluiced holds now, kept in $WORK/NAME.keys for the report.
stored_keys() {
  "$CTL" --servers "127.0.0.1:$SLUICE_PORT" stats --json |
    python3 -c "import json,sys; print(json.load(sys.stdin)['total']['keys'])" >"$WORK/$1.keys" ||
    die "cannot read sluiced's key count after $1"
}
for round in 1 2 3; do
  start_sluice 1GiB --busy-poll
  w4_round "$round" W4_sluice "${RULE[@]}"
  stored_keys "W4_sluice_r$round"
  stop_pid "$SLUICE_PID"
  R "W4_redis_lua_r$round" --busy-poll --duration "${W4_SECS}s" --rate "$W4_RATE_REDIS" \
    "${RULE[@]}" --redis-design lua_token_bucket
done
# W4T: W4 with records that live. 100 per hour: a bucket that gave one token is full again only
# 36 s later, so each of the $KEYS keys, first touched in order by a closed-loop fill, is still
# in the table while the open loop runs (stored_keys says how many were).
W4T_RULE=(--limit 100 --period 1h)
for round in 1 2 3; do
  start_sluice 1GiB --busy-poll
  S "W4T_fill_r$round" --batch 64 --dist seq --requests "$KEYS" --duration 600s "${W4T_RULE[@]}"
  w4_round "$round" W4T_sluice "${W4T_RULE[@]}"
  stored_keys "W4T_sluice_r$round"
  stop_pid "$SLUICE_PID"
done

# W6: GCRA and sliding window counter on Sluice at W2's settings vs Redis incr_window.
start_sluice 1GiB --huge-pages
S W6_sluice_gcra "${D[@]}" --depth 16 --algorithm gcra "${RULE[@]}"
S W6_sluice_sliding_window "${D[@]}" --depth 16 --algorithm sliding_window "${RULE[@]}"
R W6_redis_incr_window_sliding "${D[@]}" --depth 16 --redis-design incr_window \
  --algorithm sliding_window "${RULE[@]}"
stop_pid "$SLUICE_PID"

# sluice-load's INCR vs redis-benchmark's at the same connections and pipeline depth.
# redis-benchmark -P p writes p commands at once and waits for all p replies before the next
# write: in sluice-load's terms that is --batch p (commands per pipelined write), depth 1.
# Redis is the bottleneck for both, and its throughput drifts between runs by more than the
# difference measured, so the two alternate three times with runs of half the workload length
# and the medians are compared. Each redis-benchmark run is sized to last about as long as the
# sluice-load run before it.
HALF=$(((SECS + 1) / 2))
for p in 1 16; do
  for round in 1 2 3; do
    R "incr_P${p}_sluice_load_r${round}" --duration "${HALF}s" --batch "$p" --op incr
    tput=$(tput_of "incr_P${p}_sluice_load_r${round}")
    n=$((tput * HALF))
    ((n >= 10000)) || n=10000
    log "incr_P${p}_redis_benchmark_r${round}: redis-benchmark -c $CONNS -P $p -n $n"
    "${GEN[@]}" redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -c "$CONNS" -P "$p" -r "$KEYS" \
      -n "$n" -t incr --csv 2>/dev/null >"$WORK/incr_P${p}_redis_benchmark_r${round}.out" &
    pid=$!
    PIDS+=("$pid")
    note_affinity redis-benchmark "$pid"
    wait "$pid" || log "redis-benchmark failed (P$p round $round)"
    untrack "$pid"
    tail -1 "$WORK/incr_P${p}_redis_benchmark_r${round}.out" \
      >"$WORK/incr_P${p}_redis_benchmark_r${round}.csv"
  done
done
stop_pid "$REDIS_PID"

# W5: memory per key after touching N distinct keys, measured the same way for both backends:
# growth of the server process's resident set (VmRSS) from just after start to the end of the
# run, over N, on a fresh server per key count (keys visited in order, batch 64). The rule is
# 100 per 100 h: a bucket that gave one token is full again, and so dropped by sluiced's idle
# expiry and by the Lua script's PEXPIRE, only an hour later, so no key expires during the run.
rss_bytes() { awk '/^VmRSS:/ {print $2 * 1024}' "/proc/$1/status"; }
W5_RULE=(--batch 64 --dist seq --duration 600s --limit 100 --period 100h)
: >"$WORK/w5.txt"
for n in $W5_KEYS; do
  start_sluice 4GiB
  before=$(rss_bytes "$SLUICE_PID")
  run "W5_sluice_$n" --backend sluice --servers "127.0.0.1:$SLUICE_PORT" --keys "$n" \
    --requests "$n" "${W5_RULE[@]}"
  echo "sluice $n $before $(rss_bytes "$SLUICE_PID")" >>"$WORK/w5.txt"
  stop_pid "$SLUICE_PID"
done
for n in $W5_KEYS; do
  start_redis
  before=$(rss_bytes "$REDIS_PID")
  run "W5_redis_$n" --backend redis --servers "127.0.0.1:$REDIS_PORT" --keys "$n" \
    --requests "$n" "${W5_RULE[@]}"
  echo "redis $n $before $(rss_bytes "$REDIS_PID")" >>"$WORK/w5.txt"
  stop_pid "$REDIS_PID"
done

virt() { # prints "none" when there is none; "unknown" without systemd-detect-virt
  local what
  what="$(systemd-detect-virt "$1" 2>/dev/null || true)"
  echo "${what:-unknown}"
}
# Everything the report states about this run, gathered here so that the report is mechanical.
cxx="$(awk -F= '/^CMAKE_CXX_COMPILER:/ {print $2}' "$BUILD_DIR/CMakeCache.txt")"
{
  echo "start_epoch=$START_EPOCH"
  echo "end_epoch=$(date +%s)"
  echo "loadavg_start=$LOADAVG_START"
  echo "loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "git_commit=$git_commit"
  echo "git_dirty=$git_dirty"
  echo "compiler=$("$cxx" --version 2>/dev/null | head -1)"
  echo "build_type=$(awk -F= '/^CMAKE_BUILD_TYPE:/ {print $2}' "$BUILD_DIR/CMakeCache.txt")"
  echo "boost=$(awk '/define BOOST_LIB_VERSION/ {gsub(/"/, "", $3); print $3}' \
    /usr/include/boost/version.hpp 2>/dev/null)"
  echo "redis=$(redis-server --version)"
  echo "redis_benchmark=$(redis-benchmark --version 2>/dev/null | head -1)"
  echo "sluice=$(awk '/^project\(sluice VERSION/ {print $3}' "$ROOT/CMakeLists.txt")"
  echo "os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "virt=vm $(virt --vm), container $(virt --container)"
  echo "mem_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)"
  echo "server_cpu=$SERVER_CPU"
  echo "load_cpu=$LOAD_CPU"
  echo "shards=$SHARDS"
  echo "seconds=$SECS"
  echo "w4_seconds=$W4_SECS"
  echo "w4_mode=$W4_MODE"
  echo "w4_fraction=$W4_FRACTION"
  echo "w5_keys=$W5_KEYS"
  echo "full=$FULL"
  echo "connections=$CONNS"
  echo "keys=$KEYS"
} >"$WORK/context.txt"

mkdir -p "$OUT_DIR"
doc_arg=""
((FULL)) && doc_arg="$DOC"
python3 "$ROOT/bench/compare_report.py" "$WORK" "$RESULT" "$doc_arg"
if ((FULL)); then
  log "full run: wrote $RESULT and the generated section of $DOC"
else
  log "quick run: wrote $RESULT (docs/BENCHMARKS.md is written by full runs only)"
fi

# The replication workload (issue 13): W2 against a primary streaming to its replica against
# the same node alone, with the same pinning; it writes its own section of docs/BENCHMARKS.md
# on a full run (its length follows COMPARE_SECONDS).
log "replication workload: bench/replication.sh"
COMPARE_SECONDS="$SECS" COMPARE_SHARDS="$SHARDS" COMPARE_SERVER_CPU="$SERVER_CPU" \
  COMPARE_LOAD_CPU="$LOAD_CPU" BUILD_DIR="$BUILD_DIR" "$ROOT/bench/replication.sh"
