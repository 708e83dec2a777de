#!/usr/bin/env bash
# Envoy's Rate Limit Service served by Sluice, beside Redis doing the work envoyproxy/ratelimit
# does for the same calls, in one run on one machine. docs/BENCHMARKS.md ("Envoy's Rate Limit
# Service (issue 25)") has the method, the target and the figures of a run.
#
# Everything binds 127.0.0.1 on free ports, in a throwaway directory, pinned with taskset
# (2 cores):
#   CPU $SERVER_CPU (default 1): sluiced (one shard), sluice-gateway --grpc-listen, redis-server
#   CPU $LOAD_CPU (default 0):   sluice-load, every run
# so the limiter side gets one core, as Redis executes commands on one thread, and the load
# generator the other.
#
# The gateway reads an envoyproxy/ratelimit config written here: domain "bench", descriptors
# d0, d1, d2 each keyed by value (one counter per value) at 1,000,000 per second, so nothing is
# denied by the limit; the gateway runs with --failure-policy closed, so a call the cluster does
# not answer within the gateway's --rls-deadline (15 ms, its default) shows as a denial.
#
# Runs, each $SECS s over $KEYS keys drawn uniformly, $CONNS connections (gRPC channels for
# rls) with up to $DEPTH requests in flight on each:
#   rls   sluice-load --backend rls --descriptors D: one ShouldRateLimit call of D descriptors
#         (d<i> = the key) per request;
#   redis sluice-load --backend redis --redis-design incr_window --descriptors D: per request
#         D INCR + PEXPIRE pairs in one pipeline, allowed when every counter is within the limit
#         (envoyproxy/ratelimit's fixed window: INCRBY + EXPIRE per descriptor, pipelined);
# for D = 1 and 3, closed loop and open loop at $RATE requests/s (latency from each request's
# intended send time), after a 2 s closed-loop warm-up of each backend. Target: rls with 3
# descriptors, open loop at 10,000/s: p99 under 1 ms.
#
# Then the control: the same 3-descriptor open loop with a domain the config lacks
# (--rls-domain control), which the gateway answers OK at once without asking the cluster. Its
# latency is the gRPC round trip alone (the generator, the transport, the gateway's HTTP/2 and
# protobuf, the shared core), so the run shows how much of the rls p99 is the decision's.
#
# Each line gives the CPU each process used over the run (percent of one core: sluice-load on
# its core; sluiced, the gateway and redis-server sharing theirs). Each rls line also gives the
# share of its calls the gateway itself answered within 250 us and 1 ms (its
# decision_duration_seconds histogram, read from /metrics before and after the run), which
# tells the gateway's time from gRPC's and the generator's.
#
# Prints every run and a table; writes bench/results/rls_compare.json (a run with the defaults)
# or bench/results/rls_compare-quick.json (any shorter run). Stops everything it started.
#
# sluice-load busy-polls in every run (--busy-poll, as compare.sh's W4): its core is its own, and
# so neither a wake-up of its own nor a hand-over between its threads is in the latencies, which
# are then the servers' and the transport's (RLS_LOAD_FLAGS="" runs it sleeping in epoll, as
# before 2026-12-07).
#
# Environment: RLS_SECONDS (default 10), RLS_RATE (10000), RLS_KEYS (100000), RLS_CONNS (4),
# RLS_DEPTH (16), RLS_LOAD_FLAGS (--busy-poll), SERVER_CPU (1), LOAD_CPU (0), BUILD_DIR (build).
set -Eeuo pipefail
trap 'echo "rls_compare: error: line $LINENO failed: $BASH_COMMAND" >&2' ERR

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECS="${RLS_SECONDS:-10}"
RATE="${RLS_RATE:-10000}"
KEYS="${RLS_KEYS:-100000}"
CONNS="${RLS_CONNS:-4}"
DEPTH="${RLS_DEPTH:-16}"
LOAD_FLAGS="${RLS_LOAD_FLAGS---busy-poll}"
SERVER_CPU="${SERVER_CPU:-1}"
LOAD_CPU="${LOAD_CPU:-0}"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
OUT_DIR="$ROOT/bench/results"
GENEROUS=1000000

log() { echo "rls_compare: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}
is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }
for v in SECS RATE KEYS CONNS DEPTH SERVER_CPU LOAD_CPU; do
  is_uint "${!v}" || die "$v must be a whole number, got '${!v}'"
done
((SECS >= 1 && RATE >= 1 && KEYS >= 1 && CONNS >= 1 && DEPTH >= 1)) ||
  die "RLS_SECONDS, RLS_RATE, RLS_KEYS, RLS_CONNS and RLS_DEPTH must be at least 1"
if ((SECS >= 10 && RATE == 10000)); then
  RESULT="$OUT_DIR/rls_compare.json"
else
  RESULT="$OUT_DIR/rls_compare-quick.json"
fi

if ! command -v redis-server >/dev/null; then
  log "installing redis-server"
  "$ROOT/tools/deps.sh" redis-server || die "could not install redis-server (tools/deps.sh)"
fi
for tool in taskset python3 redis-server ninja; do
  command -v "$tool" >/dev/null || die "$tool is not installed"
done
for cpu in "$SERVER_CPU" "$LOAD_CPU"; do
  taskset -c "$cpu" true 2>/dev/null || die "CPU $cpu cannot be used (this machine has $(nproc))"
done
[[ "$SERVER_CPU" != "$LOAD_CPU" ]] ||
  log "warning: servers and load generator share CPU $SERVER_CPU"

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

[[ -f "$BUILD_DIR/build.ninja" ]] ||
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
nice -n 10 ninja -C "$BUILD_DIR" -j 2 sluiced sluice-gateway sluice-load >/dev/null ||
  die "build failed in $BUILD_DIR"
SLUICED="$BUILD_DIR/bin/sluiced"
GATEWAY="$BUILD_DIR/bin/sluice-gateway"
LOAD="$BUILD_DIR/bin/sluice-load"
build_type="$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD_DIR/CMakeCache.txt")"
git_commit="$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo "not a git checkout")"
git_dirty="$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null |
  awk '{print $NF}' | paste -sd' ')"

DIR="$(mktemp -d /tmp/sluice-rls-bench.XXXXXX)"
cleanup() {
  stop_pids "${PIDS[@]}"
  rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rls_bench_config "$DIR/bench.yaml"  # bench/lib.sh: d0, d1, d2 at $GENEROUS per second

# Ports: sluiced (+1 its shard), the gateway's HTTP and gRPC ports, redis.
base=$(free_ports 5)
SLUICED_PORT=$base
HTTP_PORT=$((base + 2))
GRPC_PORT=$((base + 3))
REDIS_PORT=$((base + 4))

start_sluiced "$DIR/sluiced.log" "$SLUICED_PORT" "$SERVER_CPU" --shards 1 --max-memory 1GiB \
  --idle-timeout 0 || die "sluiced did not start: $(cat "$DIR/sluiced.log")"
SLUICED_PID=$STARTED_PID
taskset -c "$SERVER_CPU" "$GATEWAY" --listen "127.0.0.1:$HTTP_PORT" \
  --grpc-listen "127.0.0.1:$GRPC_PORT" --servers "127.0.0.1:$SLUICED_PORT" \
  --rules "$DIR/bench.yaml" --failure-policy closed >"$DIR/gateway.log" 2>&1 &
GATEWAY_PID=$!
PIDS+=("$GATEWAY_PID")
listening "$GRPC_PORT" "$GATEWAY_PID" || die "the gateway did not start: $(cat "$DIR/gateway.log")"
taskset -c "$SERVER_CPU" redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' \
  --appendonly no --daemonize no --protected-mode yes --dir "$DIR" >"$DIR/redis.log" 2>&1 &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
listening "$REDIS_PORT" "$REDIS_PID" || die "redis-server did not start: $(cat "$DIR/redis.log")"

# The cores each process's threads may run on, as /proc says.
cpus_of() {
  (cat /proc/"$1"/task/*/status 2>/dev/null || true) |
    awk '/^Cpus_allowed_list:/ {print $2}' | sort -u | paste -sd' '
}

# The CPU time each server process has used so far, in clock ticks (/proc/PID/stat's utime +
# stime: the scheduler's own account; the per-core ticks of /proc/stat miss short bursts).
# A process whose stat cannot be read (it exited) fails the run: no figure stands in for it.
cpu_ticks() { # FILE
  local role pid ticks
  for role in sluiced:$SLUICED_PID gateway:$GATEWAY_PID redis:$REDIS_PID; do
    pid=${role#*:}
    ticks=$(awk '{print $14 + $15}' /proc/"$pid"/stat) ||
      die "cannot read the CPU time of ${role%%:*} (pid $pid): has it exited?"
    echo "${role%%:*} $ticks"
  done >"$1"
}
load() { # NAME ARGS...: one sluice-load run on LOAD_CPU, its JSON in $DIR/NAME.json
  local name=$1
  shift
  cpu_ticks "$DIR/$name.cpu-before"
  # The generator's own CPU time: `times` in the subshell gives its children's, after the run.
  (
    # shellcheck disable=SC2086 # LOAD_FLAGS is a list of flags
    taskset -c "$LOAD_CPU" "$LOAD" -q --json --keys "$KEYS" --connections "$CONNS" \
      --depth "$DEPTH" --algorithm fixed_window --limit "$GENEROUS" --period 1s $LOAD_FLAGS "$@" \
      >"$DIR/$name.json" || true # a run with errors exits 1; its JSON says what happened
    times >"$DIR/$name.times" # a builtin: no fork, so the children are this subshell's
  )
  cpu_ticks "$DIR/$name.cpu-after"
  [[ -s "$DIR/$name.json" ]] || die "sluice-load printed nothing for $name"
}
# The gateway's own latency histogram (sluice_gateway_decision_duration_seconds{endpoint="rls"}:
# from the call reaching the RLS front to its answer being built, gRPC's transport and queues
# not included), before and after an rls run.
scrape() { # FILE
  python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
    "http://127.0.0.1:$HTTP_PORT/metrics" >"$1" || die "cannot read the gateway's /metrics"
}
rls() {
  local name=$1
  scrape "$DIR/$name.before"
  load "$@" --backend rls --servers "127.0.0.1:$GRPC_PORT"
  scrape "$DIR/$name.after"
}
# After a Redis run, its counters go (FLUSHALL, synchronous): else Redis would spend the next
# run expiring them, on the core it shares with the gateway.
flush_redis() {
  local reply
  exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT"
  printf 'FLUSHALL\r\n' >&3
  read -r -t 30 reply <&3 || reply="no reply"
  exec 3<&-
  [[ "$reply" == +OK* ]] || die "FLUSHALL: $reply"
}
redis() {
  load "$@" --backend redis --redis-design incr_window --servers "127.0.0.1:$REDIS_PORT"
  flush_redis
}

cat >"$DIR/report.py" <<'PY'
import json, os, re, sys

def row(path):
    r = json.load(open(path))
    lat = r["latency_us"]
    control = os.path.basename(path).startswith("control-")
    backend = ("rls control (no cluster)" if control else "rls (sluice-gateway)") \
        if r["backend"] == "rls" else "redis incr_window"
    mode = f"open {r['rate']:.0f}/s" if r["mode"] == "open" else "closed"
    return {"name": os.path.basename(path)[:-5], "backend": backend, "descriptors": r["descriptors"],
            "mode": mode, "throughput": r["throughput_per_s"], "p50": lat["p50"], "p99": lat["p99"],
            "p999": lat["p999"], "max": lat["max"], "sent": r["sent"], "allowed": r["allowed"],
            "denied": r["denied"], "errors": r["errors"], "behind": r.get("behind", 0),
            "first_error": r.get("first_error", "")}

def buckets(path):
    out = {}
    for l in open(path).read().splitlines():
        if l.startswith('sluice_gateway_decision_duration_seconds_bucket{endpoint="rls",le="'):
            le = l.split('le="')[1].split('"')[0]
            out[le] = float(l.rsplit(" ", 1)[1])
    return out

# The share of the run's calls the gateway answered within 250 us and 1 ms, by its histogram.
def gateway_share(path):
    base = path[:-5]
    before, after = buckets(base + ".before"), buckets(base + ".after")
    # Only rls runs have the scrapes; one that counted no call fails rather than print nothing.
    total = after["+Inf"] - before["+Inf"]
    if total <= 0:
        raise ValueError(f"{base}: the gateway's histogram counted no call over the run")
    within = lambda le: (after[le] - before[le]) / total * 100
    return within("0.00025"), within("0.001")

# The CPU each process used over the run, in percent of one core over the run's duration:
# {"sluice-load": 41.0, "sluiced": 12.3, "gateway": 80.1, "redis": 0.2}.
# A file missing or unreadable, or a run of no duration, raises: the run fails rather than
# printing a figure that was not measured.
def cpu_busy(path):
    base = path[:-5]
    seconds = json.load(open(path))["duration_s"]
    if not seconds:
        raise ValueError(f"{path}: the run has no duration")
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    children = open(base + ".times").read().splitlines()[-1]  # times' second line
    minutes = re.findall(r"(\d+)m([\d.]+)s", children)
    if len(minutes) != 2:
        raise ValueError(f"{base}.times: no user and system times in {children!r}")
    out["sluice-load"] = 100 * sum(int(m) * 60 + float(s) for m, s in minutes) / seconds
    read = lambda p: {l.split()[0]: int(l.split()[1]) for l in open(p)}
    a, b = read(base + ".cpu-before"), read(base + ".cpu-after")
    if a.keys() != b.keys():
        raise ValueError(f"{base}: CPU times before and after name other processes")
    for role in b:
        out[role] = 100 * (b[role] - a[role]) / ticks / seconds
    return out

def line(path):
    w = row(path)
    out = (f"{w['backend']:<24} {w['descriptors']} descriptor{'s' if w['descriptors'] > 1 else ' '}"
           f" {w['mode']:<12} {w['throughput']:>9,.0f}/s  p50 {w['p50']:>6} us  p99 {w['p99']:>6} us"
           f"  p99.9 {w['p999']:>6} us  max {w['max']:>6} us  (sent {w['sent']} allowed {w['allowed']}"
           f" denied {w['denied']} errors {w['errors']} behind {w['behind']})")
    busy = cpu_busy(path)
    out += "; CPU " + ", ".join(f"{c} {v:.0f}%" for c, v in busy.items())
    if json.load(open(path))["backend"] == "rls":
        share = gateway_share(path)
        out += f"; the gateway's own time: {share[0]:.1f}% within 250 us, {share[1]:.1f}% within 1 ms"
    if w["first_error"]: out += " first error: " + w["first_error"]
    print(out)

def finish(result, meta, rate, *paths):
    rows = [row(p) for p in paths]
    for p, w in zip(paths, rows):
        if json.load(open(p))["backend"] == "rls":
            w["gateway_within_250us_pct"], w["gateway_within_1ms_pct"] = gateway_share(p)
        w["cpu_pct_of_a_core"] = cpu_busy(p)
    print("table:")
    print(f"  {'backend':<24} {'desc':>4}  {'mode':<12} {'throughput':>11} {'p50 us':>7}"
          f" {'p99 us':>7} {'p99.9 us':>8} {'errors':>6} {'denied':>6} {'behind':>6}")
    for w in rows:
        print(f"  {w['backend']:<24} {w['descriptors']:>4}  {w['mode']:<12} {w['throughput']:>9,.0f}/s"
              f" {w['p50']:>7} {w['p99']:>7} {w['p999']:>8} {w['errors']:>6} {w['denied']:>6}"
              f" {w['behind']:>6}")
    by_name = {w["name"]: w for w in rows}
    verdict = "not run"
    if "rls-3-open" in by_name:
        w = by_name["rls-3-open"]
        ok = w["p99"] < 1000 and w["errors"] == 0 and w["behind"] == 0
        verdict = "met" if ok else "MISSED"
        print(f"target: rls, 3 descriptors, open loop at {rate}/s: p99 {w['p99']} us"
              f" (under 1000 us{', no errors, nothing behind' if ok else ''}): {verdict}")
    doc = json.load(open(meta))
    # (A latency of 0 us is not a measurement: no ratio then.)
    if "rls-3-open" in by_name and "control-3-open" in by_name and \
            by_name["control-3-open"]["p50"] > 0:
        w, c = by_name["rls-3-open"], by_name["control-3-open"]
        print(f"control: the gRPC round trip alone (no cluster), 3 descriptors, open loop at"
              f" {rate}/s: p50 {c['p50']} us, p99 {c['p99']} us, p99.9 {c['p999']} us;"
              f" rls / control: p50 {w['p50'] / c['p50']:.2f}, p99 {w['p99'] / c['p99']:.2f}")
        doc["control_p50_us"], doc["control_p99_us"] = c["p50"], c["p99"]
        doc["rls_over_control_p50"] = round(w["p50"] / c["p50"], 3)
        doc["rls_over_control_p99"] = round(w["p99"] / c["p99"], 3)
    doc["runs"] = rows
    doc["target_p99_under_1ms_3_descriptors"] = verdict
    with open(result, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")

globals()[sys.argv[1]](*sys.argv[2:])
PY

START="$(date -u '+%Y-%m-%dT%H:%M:%SZ')"
LOADAVG_START="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), Linux $(uname -r);" \
  "$(redis-server --version | awk '{print $1, $2, $3}')"
echo "code: commit $git_commit${git_dirty:+ (modified: $git_dirty)}, $build_type build in $BUILD_DIR"
echo "start: $(date -u '+%Y-%m-%d %H:%M UTC'), load average $LOADAVG_START"
echo "pinning: sluiced (1 shard), sluice-gateway and redis-server on CPU $SERVER_CPU" \
  "(seen: $(cpus_of "$SLUICED_PID"), $(cpus_of "$GATEWAY_PID"), $(cpus_of "$REDIS_PID"));" \
  "sluice-load on CPU $LOAD_CPU${LOAD_FLAGS:+ ($LOAD_FLAGS)}"
echo "runs: ${SECS} s each, $KEYS keys uniform, $CONNS connections x depth $DEPTH;" \
  "open loop at $RATE/s; after a 2 s closed-loop warm-up of each backend"

rls warmup-rls --descriptors 3 --duration 2s
redis warmup-redis --descriptors 3 --duration 2s
RUNS=()
for d in 1 3; do
  for mode in closed open; do
    args=(--descriptors "$d" --duration "${SECS}s")
    [[ $mode == open ]] && args+=(--rate "$RATE")
    for backend in rls redis; do
      name="$backend-$d-$mode"
      "$backend" "$name" "${args[@]}"
      python3 "$DIR/report.py" line "$DIR/$name.json"
      RUNS+=("$DIR/$name.json")
    done
  done
done
# The control: a domain the config lacks, answered without the cluster (see the top).
rls control-3-open --descriptors 3 --duration "${SECS}s" --rate "$RATE" --rls-domain control
python3 "$DIR/report.py" line "$DIR/control-3-open.json"
RUNS+=("$DIR/control-3-open.json")
echo "end: $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$DIR/meta.json" <<PY
import json, sys
json.dump({"date": "$START", "end": "$(date -u '+%Y-%m-%dT%H:%M:%SZ')",
           "context": {"git_commit": "$git_commit", "git_dirty": "$git_dirty",
                       "build_type": "$build_type", "loadavg_start": "$LOADAVG_START",
                       "loadavg_end": "$(cut -d' ' -f1-3 /proc/loadavg)",
                       "server_cpu": "$SERVER_CPU", "load_cpu": "$LOAD_CPU", "seconds": $SECS,
                       "rate": $RATE, "keys": $KEYS, "connections": $CONNS, "depth": $DEPTH,
                       "load_flags": "$LOAD_FLAGS",
                       "redis": "$(redis-server --version)"},
           "machine": {"cores": $(nproc), "cpu": "$(lscpu | sed -n 's/^Model name: *//p')",
                       "kernel": "$(uname -r)"}},
          open(sys.argv[1], "w"))
PY
mkdir -p "$OUT_DIR"
python3 "$DIR/report.py" finish "$RESULT" "$DIR/meta.json" "$RATE" "${RUNS[@]}"
log "wrote $RESULT"
if grep -q "cannot\|error" "$DIR/gateway.log"; then
  log "gateway log: $(grep -c "cannot\|error" "$DIR/gateway.log") lines with errors"
fi
