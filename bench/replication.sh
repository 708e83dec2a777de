#!/usr/bin/env bash
# The cost of replication (issue 13): W2 against a primary that streams every change to its
# replica, against W2 on the same node alone, side by side in one run, pinned the same way.
# docs/BENCHMARKS.md ("Replication") says what is measured and shows the last full run.
#
#   alone       node A in a cluster file that lists only A: cluster mode (ownership checks,
#               epochs in every reply), every key A's, no replica. Node B runs too, idle.
#   replicated  A and B in one cluster file: sluice-load sends only keys whose primary is A
#               (--only-node A), so A decides every one and streams it to B.
#
# Both rounds: A on COMPARE_SERVER_CPU (default 0), B and sluice-load on COMPARE_LOAD_CPU
# (default 1): B's applying competes with the load generator, never with A. Rounds alternate,
# alone first, REPL_ROUNDS times (default 3), each on fresh nodes; the median ratio is judged
# (target >= 0.85). CPU time of A and B (utime + stime from /proc) over each round, divided by
# the decisions made, gives the CPU cost per decision; the replicated round less the alone one
# is replication's cost on the primary, B's is the replica's cost of applying.
#
# Environment: COMPARE_SECONDS (seconds per round, default 10; less is a quick run, which does
# not touch docs/BENCHMARKS.md), REPL_ROUNDS, COMPARE_SHARDS (default 1), COMPARE_SERVER_CPU,
# COMPARE_LOAD_CPU, BUILD_DIR (default build-bench, RelWithDebInfo). Called by compare.sh too.
set -Eeuo pipefail
trap 'echo "replication: error: line $LINENO failed: $BASH_COMMAND" >&2' ERR

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECS="${COMPARE_SECONDS:-10}"
ROUNDS="${REPL_ROUNDS:-3}"
SHARDS="${COMPARE_SHARDS:-1}"
SERVER_CPU="${COMPARE_SERVER_CPU:-0}"
LOAD_CPU="${COMPARE_LOAD_CPU:-1}"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-bench}"
DOC="$ROOT/docs/BENCHMARKS.md"
CONNS=50
KEYS=1000000

log() { echo "replication: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}
[[ "$SECS" =~ ^[0-9]+$ ]] && ((SECS >= 1)) || die "COMPARE_SECONDS must be >= 1"
[[ "$ROUNDS" =~ ^[0-9]+$ ]] && ((ROUNDS >= 1)) || die "REPL_ROUNDS must be >= 1"
FULL=0
((SECS >= 10 && ROUNDS >= 3)) && FULL=1
for cpu in "$SERVER_CPU" "$LOAD_CPU"; do
  taskset -c "$cpu" true 2>/dev/null || die "CPU '$cpu' cannot be used"
done
command -v python3 >/dev/null || die "python3 is missing"

LOAD="$BUILD_DIR/bin/sluice-load"
SLUICED="$BUILD_DIR/bin/sluiced"
log "building sluice-load and sluiced in $BUILD_DIR"
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
ninja -C "$BUILD_DIR" -j2 sluice-load sluiced >/dev/null || die "build failed in $BUILD_DIR"
commit="$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
dirty="$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null | awk '{print $NF}' |
  paste -sd' ')"

WORK="$(mktemp -d /tmp/sluice-replication.XXXXXX)"
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# free_ports N and listening PORT PID.
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
cpu_ticks() { # utime + stime of PID and all its threads, in clock ticks
  awk '{print $14 + $15}' "/proc/$1/stat"
}
stop_pid() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  local keep=() p
  for p in "${PIDS[@]}"; do [[ "$p" == "$1" ]] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}

# start_node NAME CPU FILE: sluiced as node NAME of FILE, pinned to CPU; sets PID_<NAME>.
start_node() {
  local name="$1" cpu="$2" file="$3" port="${4}" pid
  taskset -c "$cpu" "$SLUICED" --bind 127.0.0.1 --port "$port" --shards "$SHARDS" \
    --max-memory 1GiB --idle-timeout 0 --huge-pages --cluster "$file" --node-id "$name" \
    >"$WORK/$name.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  listening "$port" "$pid" || die "sluiced $name did not start: $(tail -c 300 "$WORK/$name.log")"
  printf -v "PID_$name" '%s' "$pid"
}

# round KIND N: one round on fresh nodes; appends "KIND N throughput decisions a_ticks b_ticks".
round() {
  local kind="$1" n="$2" a_port b_port file="$WORK/cluster-$1-$2.conf" only=()
  a_port="$(free_ports $((SHARDS + 1)))"
  b_port="$(free_ports $((SHARDS + 1)))"
  if [[ "$kind" == alone ]]; then
    printf 'epoch 1\nA 127.0.0.1:%s\n' "$a_port" >"$file"
    printf 'epoch 1\nB 127.0.0.1:%s\n' "$b_port" >"$file.b"
    start_node A "$SERVER_CPU" "$file" "$a_port"
    start_node B "$LOAD_CPU" "$file.b" "$b_port"
  else
    printf 'epoch 1\nA 127.0.0.1:%s\nB 127.0.0.1:%s\n' "$a_port" "$b_port" >"$file"
    start_node A "$SERVER_CPU" "$file" "$a_port"
    start_node B "$LOAD_CPU" "$file" "$b_port"
    only=(--only-node A)
  fi
  # PID_A and PID_B are set by start_node through printf -v.
  # shellcheck disable=SC2154
  local a0 b0 a1 b1
  a0="$(cpu_ticks "$PID_A")"
  b0="$(cpu_ticks "$PID_B")"
  taskset -c "$LOAD_CPU" "$LOAD" -q --json --backend sluice --servers "127.0.0.1:$a_port" \
    --connections "$CONNS" --keys "$KEYS" --depth 16 --batch 1 --limit 100 --period 1s \
    --duration "${SECS}s" "${only[@]}" >"$WORK/$kind-$n.json" ||
    log "sluice-load ended with status $? in round $kind $n (see its errors below)"
  a1="$(cpu_ticks "$PID_A")"
  b1="$(cpu_ticks "$PID_B")"
  # What B applied, as the replica (0 when alone), read before the nodes stop.
  local applied
  sleep 0.2 # past the STATS snapshot's 100 ms
  applied="$("$BUILD_DIR/bin/sluicectl" --servers "127.0.0.1:$b_port" stats --json 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["total"]["replica_applied"])' \
      2>/dev/null || echo 0)"
  python3 - "$WORK/$kind-$n.json" "$kind" "$n" "$((a1 - a0))" "$((b1 - b0))" "${applied:-0}" \
    >>"$WORK/rounds.txt" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
decisions = r["allowed"] + r["denied"]
print(sys.argv[2], sys.argv[3], int(r["throughput_per_s"]), decisions, r["errors"],
      sys.argv[4], sys.argv[5], sys.argv[6])
EOF
  stop_pid "$PID_A"
  stop_pid "$PID_B"
}

LOADAVG_START="$(cut -d' ' -f1-3 /proc/loadavg)"
for n in $(seq 1 "$ROUNDS"); do
  log "round $n of $ROUNDS: alone, then replicated (${SECS} s each)"
  round alone "$n"
  round replicated "$n"
done
LOADAVG_END="$(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$WORK/rounds.txt" "$FULL" "$DOC" "$commit" "$dirty" "$SERVER_CPU" "$LOAD_CPU" \
  "$SHARDS" "$SECS" "$LOADAVG_START" "$LOADAVG_END" "$(getconf CLK_TCK)" <<'EOF'
import statistics, sys
(rounds_path, full, doc, commit, dirty, server_cpu, load_cpu, shards, secs, load0, load1,
 hz) = sys.argv[1:13]
hz = int(hz)
rows = [line.split() for line in open(rounds_path) if line.strip()]
by = {}
for kind, n, tput, decisions, errors, a_ticks, b_ticks, applied in rows:
    by.setdefault(n, {})[kind] = dict(tput=int(tput), decisions=int(decisions), errors=int(errors),
                                      a=int(a_ticks), b=int(b_ticks), applied=int(applied))
lines = []
ratios, primary_ns, replica_ns = [], [], []
lines.append("| round | W2 alone /s | W2 replicated /s | ratio | A CPU ns/decision alone | "
             "A CPU ns/decision replicated | B CPU ns/decision (applying) | B applied | errors |")
lines.append("|---|---|---|---|---|---|---|---|---|")
for n in sorted(by, key=int):
    a, r = by[n].get("alone"), by[n].get("replicated")
    if not a or not r:
        continue
    ratio = r["tput"] / a["tput"] if a["tput"] else 0.0
    ns = lambda ticks, d: 1e9 * ticks / hz / d if d else 0.0
    a_alone, a_repl = ns(a["a"], a["decisions"]), ns(r["a"], r["decisions"])
    b_repl = ns(r["b"], r["decisions"])
    ratios.append(ratio)
    primary_ns.append(a_repl - a_alone)
    replica_ns.append(b_repl)
    lines.append(f"| {n} | {a['tput']:,} | {r['tput']:,} | {ratio:.3f} | {a_alone:.0f} | "
                 f"{a_repl:.0f} | {b_repl:.0f} | {r['applied']:,} | {a['errors'] + r['errors']} |")
median = statistics.median(ratios) if ratios else 0.0
verdict = "met" if median >= 0.85 else "NOT met"
summary = (f"Median ratio replicated / alone: **{median:.3f}** (target >= 0.85: {verdict}). "
           f"Replication's CPU cost on the primary, median over rounds: "
           f"{statistics.median(primary_ns):.0f} ns per decision; the replica's cost of applying: "
           f"{statistics.median(replica_ns):.0f} ns per decision (CPU time from /proc, "
           f"{hz} ticks/s, so each node's CPU time is good to {1000 / hz:.0f} ms over a round).")
context = (f"Commit `{commit}`{' with changes in ' + dirty if dirty else ''}; {shards} shard(s) a node; "
           f"node A on CPU {server_cpu}; node B and sluice-load on CPU {load_cpu}; {secs} s a round; "
           f"50 connections, depth 16, batch 1, token bucket 100/s over 1,000,000 keys; "
           f"load average {load0} at the start, {load1} at the end.")
out = "\n".join(lines + ["", summary, "", context])
print(out)
if full == "1":
    text = open(doc).read()
    begin, end = "<!-- replication.sh:begin -->", "<!-- replication.sh:end -->"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        open(doc, "w").write(head + begin + "\n" + out + "\n" + end + tail)
        print("replication: wrote the Replication section of docs/BENCHMARKS.md", file=sys.stderr)
    else:
        print("replication: docs/BENCHMARKS.md has no replication.sh markers", file=sys.stderr)
EOF
