#!/usr/bin/env bash
# The cost of replication (issue 13): W2 against a primary that streams every change to its
# replica, against W2 on the same node alone, side by side in one run, pinned the same way.
# docs/BENCHMARKS.md ("Replication") says what is measured and shows the last full run.
#
#   alone       node A in a cluster file that lists only A: cluster mode (ownership checks,
#               epochs in every reply), every key A's, no replica. Node B runs too, idle.
#               sluice-load draws from the list of A's keys (--only-node A), as replicated.
#   replicated  A and B in one cluster file: sluice-load sends only keys whose primary is A
#               (--only-node A) among twice as many, so that A has as many keys as alone;
#               A decides every one and streams it to B.
#
# A runs on COMPARE_SERVER_CPU (default 0) and sluice-load on COMPARE_LOAD_CPU (default 1). A
# 2-core machine has no core of its own for B, so each round runs twice, once per placement of
# B: with the load generator (B's applying slows the generator, never A) and with the primary
# (B's applying takes A's core). Both kinds of run of a placement pin B alike. REPL_ROUNDS
# rounds (default 3), each run on fresh nodes; the order of the two kinds alternates from round
# to round (round 1: alone then replicated; round 2: replicated then alone; ...), so that a
# shared host drifting over a round does not favour one kind. The median ratio of each placement
# is judged (target >= 0.85). CPU time of A, B and sluice-load (utime + stime, from /proc and
# from getrusage) over each run, divided by the decisions made, gives the CPU cost per decision;
# A's in the replicated run less A's alone is replication's cost on the primary, B's is the
# replica's cost of applying. "B applied" is B's replica_applied from its STATS, read with
# sluicectl (built here with the rest): a figure that cannot be read stops the run, it is never
# printed as 0.
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
CTL="$BUILD_DIR/bin/sluicectl"
log "building sluice-load, sluiced and sluicectl in $BUILD_DIR"
# No tests here: a benchmark directory registering tests it never builds would show ctest
# tests that do not run (tools/test.sh builds and runs them in build/).
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSLUICE_BUILD_TESTS=OFF >/dev/null
fi
ninja -C "$BUILD_DIR" -j2 sluice-load sluiced sluicectl >/dev/null ||
  die "build failed in $BUILD_DIR"
commit="$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
dirty="$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null | awk '{print $NF}' |
  paste -sd' ')"

WORK="$(mktemp -d /tmp/sluice-replication.XXXXXX)"
# free_ports N, listening PORT PID, start_sluiced, and PIDS with untrack, stop_pid and stop_pids.
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
cleanup() {
  stop_pids "${PIDS[@]}"
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# Context switches of PID, summed over its threads: "voluntary involuntary". A voluntary one is
# a thread going to sleep (a node out of work waits in epoll), an involuntary one a thread
# preempted (by another process on its core).
context_switches() {
  (cat /proc/"$1"/task/*/status 2>/dev/null || true) | awk '
    /^voluntary_ctxt_switches:/ { v += $2 }
    /^nonvoluntary_ctxt_switches:/ { n += $2 }
    END { print v + 0, n + 0 }'
}
cpu_ticks() { # utime + stime of PID and all its threads, in clock ticks
  awk '{print $14 + $15}' "/proc/$1/stat"
}

# start_node NAME CPU FILE: sluiced as node NAME of FILE, pinned to CPU; sets PID_<NAME>.
start_node() {
  local name="$1" cpu="$2" file="$3" port="$4"
  start_sluiced "$WORK/$name.log" "$port" "$cpu" --shards "$SHARDS" --max-memory 1GiB \
    --idle-timeout 0 --huge-pages --cluster "$file" --node-id "$name" ||
    die "sluiced $name did not start: $(tail -c 300 "$WORK/$name.log")"
  printf -v "PID_$name" '%s' "$STARTED_PID"
}

# round PLACEMENT KIND N: one run on fresh nodes, B pinned with the load generator (PLACEMENT
# "load") or with A ("primary"); appends "PLACEMENT KIND N throughput decisions errors a_ticks
# b_ticks applied load_seconds" to rounds.txt.
round() {
  local placement="$1" kind="$2" n="$3" a_port b_port file="$WORK/cluster-$1-$2-$3.conf" only=()
  local b_cpu="$LOAD_CPU" keys="$KEYS"
  [[ "$placement" == primary ]] && b_cpu="$SERVER_CPU"
  a_port="$(free_ports $((SHARDS + 1)))"
  b_port="$(free_ports $((SHARDS + 1)))"
  if [[ "$kind" == alone ]]; then
    printf 'epoch 1\nA 127.0.0.1:%s\n' "$a_port" >"$file"
    printf 'epoch 1\nB 127.0.0.1:%s\n' "$b_port" >"$file.b"
    start_node A "$SERVER_CPU" "$file" "$a_port"
    start_node B "$b_cpu" "$file.b" "$b_port"
  else
    printf 'epoch 1\nA 127.0.0.1:%s\nB 127.0.0.1:%s\n' "$a_port" "$b_port" >"$file"
    start_node A "$SERVER_CPU" "$file" "$a_port"
    start_node B "$b_cpu" "$file" "$b_port"
    # A owns about half of the keys: twice as many keys give it as many as alone (a smaller
    # key set would favour the replicated run with fewer cache misses in A and the generator).
    keys=$((KEYS * 2))
  fi
  # Both runs draw from the list of A's keys (every key when alone): the generator does the
  # same work per decision in both (drawing a listed key is cheaper than making one).
  only=(--only-node A)
  # PID_A and PID_B are set by start_node through printf -v.
  # shellcheck disable=SC2154
  local a0 b0 a1 b1
  a0="$(cpu_ticks "$PID_A")"
  local a_sleeps0 a_preempted0 a_sleeps1 a_preempted1
  read -r a_sleeps0 a_preempted0 < <(context_switches "$PID_A")
  b0="$(cpu_ticks "$PID_B")"
  local run="$placement-$kind-$n"
  # The generator's CPU seconds (user + system, getrusage of the child) go to $run.cpu.
  taskset -c "$LOAD_CPU" python3 -c '
import resource, subprocess, sys
code = subprocess.run(sys.argv[2:]).returncode
used = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{used.ru_utime + used.ru_stime:.3f}\n")
sys.exit(code)' "$WORK/$run.cpu" "$LOAD" -q --json --backend sluice \
    --servers "127.0.0.1:$a_port" --connections "$CONNS" --keys "$keys" --depth 16 --batch 1 \
    --limit 100 --period 1s --duration "${SECS}s" "${only[@]}" >"$WORK/$run.json" ||
    log "sluice-load ended with status $? in $run (see its errors below)"
  a1="$(cpu_ticks "$PID_A")"
  read -r a_sleeps1 a_preempted1 < <(context_switches "$PID_A")
  b1="$(cpu_ticks "$PID_B")"
  # What B applied, as the replica (0 when alone), read before the nodes stop.
  local applied load_cpu_s
  sleep 0.2 # past the STATS snapshot's 100 ms
  "$CTL" --servers "127.0.0.1:$b_port" stats --json >"$WORK/$run.stats" 2>"$WORK/$run.stats.err" ||
    die "cannot read B's STATS after $run: $(cat "$WORK/$run.stats.err")"
  applied="$(python3 -c '
import json, sys
print(json.load(open(sys.argv[1]))["total"]["replica_applied"])' "$WORK/$run.stats" \
    2>"$WORK/$run.stats.err")" ||
    die "no total.replica_applied in B's STATS after $run: $(tail -n 1 "$WORK/$run.stats.err")"
  load_cpu_s="$(cat "$WORK/$run.cpu")" || die "no CPU time of sluice-load for $run"
  python3 - "$WORK/$run.json" "$placement" "$kind" "$n" "$((a1 - a0))" "$((b1 - b0))" \
    "$applied" "$load_cpu_s" "$((a_sleeps1 - a_sleeps0))" "$((a_preempted1 - a_preempted0))" \
    >>"$WORK/rounds.txt" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
decisions = r["allowed"] + r["denied"]
print(sys.argv[2], sys.argv[3], sys.argv[4], int(r["throughput_per_s"]), decisions, r["errors"],
      *sys.argv[5:11])
EOF
  stop_pid "$PID_A"
  stop_pid "$PID_B"
}

LOADAVG_START="$(cut -d' ' -f1-3 /proc/loadavg)"
for n in $(seq 1 "$ROUNDS"); do
  # Odd rounds run alone first, even rounds replicated first.
  if ((n % 2 == 1)); then kinds=(alone replicated); else kinds=(replicated alone); fi
  for placement in load primary; do
    log "round $n of $ROUNDS, B with the $placement: ${kinds[0]}, then ${kinds[1]} (${SECS} s each)"
    round "$placement" "${kinds[0]}" "$n"
    round "$placement" "${kinds[1]}" "$n"
  done
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
for (placement, kind, n, tput, decisions, errors, a_ticks, b_ticks, applied, load_s, sleeps,
     preempted) in rows:
    by.setdefault((placement, n), {})[kind] = dict(
        tput=int(tput), decisions=int(decisions), errors=int(errors), a=int(a_ticks),
        b=int(b_ticks), applied=int(applied), load=float(load_s), sleeps=int(sleeps),
        preempted=int(preempted))
where = {"load": f"B with sluice-load on CPU {load_cpu}", "primary": f"B with A on CPU {server_cpu}"}
lines = ["| round | B's core | W2 alone /s | W2 replicated /s | ratio | A ns/decision alone | "
         "A ns/decision replicated | B ns/decision | load ns/decision alone | "
         "load ns/decision replicated | A sleeps /1k alone | A sleeps /1k replicated | "
         "A preempted /1k replicated | B applied | errors |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
summary = []
ns = lambda seconds, d: 1e9 * seconds / d if d else 0.0
per_k = lambda count, d: 1000 * count / d if d else 0.0
for placement in ("load", "primary"):
    ratios, primary_ns, replica_ns = [], [], []
    for (p, n) in sorted((k for k in by if k[0] == placement), key=lambda k: int(k[1])):
        a, r = by[(p, n)].get("alone"), by[(p, n)].get("replicated")
        if not a or not r:
            continue
        ratio = r["tput"] / a["tput"] if a["tput"] else 0.0
        a_alone, a_repl = ns(a["a"] / hz, a["decisions"]), ns(r["a"] / hz, r["decisions"])
        b_repl = ns(r["b"] / hz, r["decisions"])
        ratios.append(ratio)
        primary_ns.append(a_repl - a_alone)
        replica_ns.append(b_repl)
        lines.append(f"| {n} | {placement} | {a['tput']:,} | {r['tput']:,} | {ratio:.3f} | "
                     f"{a_alone:.0f} | {a_repl:.0f} | {b_repl:.0f} | "
                     f"{ns(a['load'], a['decisions']):.0f} | {ns(r['load'], r['decisions']):.0f} | "
                     f"{per_k(a['sleeps'], a['decisions']):.2f} | "
                     f"{per_k(r['sleeps'], r['decisions']):.2f} | "
                     f"{per_k(r['preempted'], r['decisions']):.2f} | "
                     f"{r['applied']:,} | {a['errors'] + r['errors']} |")
    if not ratios:
        continue
    median = statistics.median(ratios)
    verdict = "met" if median >= 0.85 else "NOT met"
    summary.append(
        f"{where[placement]}: median ratio replicated / alone **{median:.3f}** (target >= 0.85: "
        f"{verdict}); replication's CPU cost on the primary, median over rounds: "
        f"{statistics.median(primary_ns):.0f} ns per decision; the replica's cost of applying: "
        f"{statistics.median(replica_ns):.0f} ns per decision.")
summary.append("A sleeps: A's voluntary context switches (a shard waiting for input) per 1,000 "
               "decisions; A preempted: its involuntary ones (another process on its core).")
summary.append(f"CPU time from /proc for the nodes ({hz} ticks/s, so good to {1000 / hz:.0f} ms "
               f"over a run) and from getrusage for sluice-load.")
summary = "\n\n".join(summary)
context = (f"Commit `{commit}`{' with changes in ' + dirty if dirty else ''}; {shards} shard(s) a node; "
           f"node A on CPU {server_cpu}; sluice-load on CPU {load_cpu}; B as the column says; "
           f"{secs} s a run; 50 connections, depth 16, batch 1, token bucket 100/s over "
           f"1,000,000 keys of A's (--only-node A; 2,000,000 keys in all when replicated); load average {load0} at the start, {load1} at the end.")
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
