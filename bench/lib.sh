# shellcheck shell=bash
# Shell helpers shared by the benchmark scripts (sourced, not run): free loopback ports, waiting
# for a listener, starting sluiced, reading a process's CPU time, and stopping the processes a
# script started.

# free_ports N: the first of N consecutive ports that 127.0.0.1 can bind now, chosen below the
# kernel's ephemeral range, so that no outgoing connection on this machine is given one of them.
free_ports() {
  python3 - "$1" <<'EOF'
import random, socket, sys
n = int(sys.argv[1])
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(1000):
    base = random.randrange(10000, max(10001, low - n))
    socks = []
    try:
        for p in range(base, base + n):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", p))
        print(base)
        break
    except OSError:
        pass
    finally:
        for s in socks:
            s.close()
else:
    sys.exit("no free loopback ports")
EOF
}
listening() { # PORT PID: until something accepts on PORT (at most 10 s), false if PID exits
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# Every process a script started, until it is seen to exit (PIDS+=("$pid") after starting one).
PIDS=()
# start_sluiced LOG PORT CPU ARGS...: $SLUICED on 127.0.0.1:PORT, pinned to CPU, its output in
# LOG, tracked in PIDS; its pid in STARTED_PID. False when it does not listen within 10 s.
STARTED_PID=""
start_sluiced() {
  local log="$1" port="$2" cpu="$3"
  shift 3
  taskset -c "$cpu" "$SLUICED" --bind 127.0.0.1 --port "$port" "$@" >"$log" 2>&1 &
  STARTED_PID=$!
  PIDS+=("$STARTED_PID")
  listening "$port" "$STARTED_PID"
}
# start_closed_loop_sluiced TOOL LOG PORT CPU: start_sluiced with the closed-loop workloads'
# settings (one shard, 1 GiB, no idle timeout, records in huge pages); if it does not listen,
# exits naming TOOL with the end of LOG.
start_closed_loop_sluiced() {
  start_sluiced "$2" "$3" "$4" --shards 1 --max-memory 1GiB --idle-timeout 0 --huge-pages || {
    echo "$1: sluiced did not start: $(tail -c 300 "$2")" >&2
    exit 1
  }
}
# cpu_ticks PID: the process's user and system CPU time so far, in clock ticks (getconf CLK_TCK).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
untrack() { # PID: no longer stopped at exit
  local keep=() p
  for p in "${PIDS[@]}"; do [[ "$p" == "$1" ]] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}
stop_pids() { # PID...: SIGTERM to all, then SIGKILL to each still running 5 s later
  local pid
  for pid in "$@"; do kill "$pid" 2>/dev/null || true; done
  for pid in "$@"; do
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
  done
}
stop_pid() { # PID: SIGTERM, SIGKILL if it still runs 10 s later; then untracked
  kill "$1" 2>/dev/null || true
  for _ in $(seq 1 100); do
    if ! kill -0 "$1" 2>/dev/null; then
      untrack "$1"
      return 0
    fi
    sleep 0.1
  done
  kill -9 "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  untrack "$1"
}

# rls_bench_config FILE: the envoyproxy/ratelimit config the RLS benchmarks give the gateway:
# domain "bench", key-only descriptors d0, d1, d2 at 1,000,000 per second each, so the limit
# denies nothing (bench/rls_ab.sh, bench/rls_callgrind.sh, bench/rls_compare.sh).
rls_bench_config() {
  cat >"$1" <<'YAML'
domain: bench
descriptors:
  - key: d0
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: d1
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: d2
    rate_limit: {unit: second, requests_per_unit: 1000000}
YAML
}
