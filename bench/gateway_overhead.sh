#!/usr/bin/env bash
# What Sluice adds to a request through nginx, and whether the limit holds across nginx
# instances. One run on this machine; docs/BENCHMARKS.md ("Gateway overhead") has the method,
# the target and the figures of a run.
#
# Everything binds 127.0.0.1 on free ports, in a throwaway directory, pinned with taskset:
#   CPU $NGINX_CPU (default 0): every nginx (one process each: master_process off) and the load
#                               generator (sluice-load, wrk)
#   CPU $SLUICE_CPU (default 1): sluice-gateway (one per nginx) and sluiced (one shard)
# so the three variants share the same core with the same load generator, and the limiter gets
# the other core. nginx is never the system service.
#
# 1. Overhead: nginx in front of a stub upstream (an nginx `return 200` server) as
#    plain       proxy_pass to the stub;
#    limit_req   nginx's own limit_req per X-API-Key (generous), then the stub;
#    sluice      auth_request to sluice-gateway (examples/nginx/sluice.conf; generous policy),
#                then the stub.
#    Each: sluice-load --backend http open loop at $RATE/s for $SECS s over $CONNS connections
#    (latency from intended send times), then wrk -t1 -c$CONNS -d${SECS}s --latency (closed
#    loop), $ROUNDS rounds, the variants interleaved in each round, after a 2 s warm-up of each.
# 2. Audit: a rule of $LIMIT per key per hour (token bucket) over $KEYS keys, each key asked 3 x
#    $LIMIT times per nginx (--dist seq):
#    a. one nginx + sluice: sluice-load's audit, and admitted == LIMIT x KEYS;
#    b. two nginx, each with its own gateway, one sluiced: both driven at once; admitted per key
#       counted from the two access logs together: every key exactly LIMIT;
#    c. the same two nginx with limit_req (burst LIMIT - 1, 1 per minute): per key, summed.
#
# Environment: GW_SECONDS (default 10), GW_ROUNDS (3), GW_RATE (5000), GW_CONNS (16),
# GW_LIMIT (10), GW_KEYS (200), NGINX_CPU (0), SLUICE_CPU (1), BUILD_DIR (build).
set -Eeuo pipefail
trap 'echo "gateway_overhead: error: line $LINENO failed: $BASH_COMMAND" >&2' ERR

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECS="${GW_SECONDS:-10}"
ROUNDS="${GW_ROUNDS:-3}"
RATE="${GW_RATE:-5000}"
CONNS="${GW_CONNS:-16}"
LIMIT="${GW_LIMIT:-10}"
KEYS="${GW_KEYS:-200}"
NGINX_CPU="${NGINX_CPU:-0}"
SLUICE_CPU="${SLUICE_CPU:-1}"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
NGINX=/usr/sbin/nginx
BENCH_KEYS=10000

log() { echo "gateway_overhead: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}
for tool in taskset python3 wrk "$NGINX"; do
  command -v "$tool" >/dev/null || die "$tool is not installed"
done
((LIMIT >= 2)) || die "GW_LIMIT must be at least 2 (limit_req's burst is LIMIT - 1)"

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

[[ -f "$BUILD_DIR/build.ninja" ]] ||
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSLUICE_BUILD_BENCH=OFF \
    >/dev/null
nice -n 10 ninja -C "$BUILD_DIR" -j 2 sluiced sluice-gateway sluice-load >/dev/null
SLUICED="$BUILD_DIR/bin/sluiced"
GATEWAY="$BUILD_DIR/bin/sluice-gateway"
LOAD="$BUILD_DIR/bin/sluice-load"

DIR="$(mktemp -d /tmp/sluice-gw-bench.XXXXXX)"
cleanup() {
  stop_pids "${PIDS[@]}"
  rm -rf "$DIR"
}
trap cleanup EXIT

# The rules: /bench/ generous (nothing denied at RATE over BENCH_KEYS keys), /audit/ LIMIT per
# hour per key.
cat >"$DIR/rules.yaml" <<YAML
version: 1
policies:
  bench_generous:
    algorithm: token_bucket
    limit: 1000000
    period: 1s
  audit_limit:
    algorithm: token_bucket
    limit: $LIMIT
    period: 1h
matches:
  - name: bench
    when:
      path_prefix: /bench/
    key: api_key
    policies: [bench_generous]
  - name: audit
    when:
      path_prefix: /audit/
    key: api_key
    policies: [audit_limit]
YAML

# Ports: sluiced (+1 its shard), then per nginx instance: gateway, stub, plain, limit_req,
# sluice, limit_req audit, sluice audit.
base=$(free_ports 16)
SLUICED_PORT=$base
declare -A PORT
for inst in a b; do
  off=$([[ $inst == a ]] && echo 2 || echo 9)
  for name in gateway stub plain limit_req sluice limit_req_audit sluice_audit; do
    PORT[$inst.$name]=$((base + off))
    off=$((off + 1))
  done
done

start_sluiced "$DIR/sluiced.log" "$SLUICED_PORT" "$SLUICE_CPU" --shards 1 --max-memory 256MiB ||
  die "sluiced did not start: $(cat "$DIR/sluiced.log")"

start_gateway() { # INSTANCE
  taskset -c "$SLUICE_CPU" "$GATEWAY" --listen "127.0.0.1:${PORT[$1.gateway]}" \
    --servers "127.0.0.1:$SLUICED_PORT" --rules "$DIR/rules.yaml" --failure-policy closed \
    >"$DIR/gateway-$1.log" 2>&1 &
  PIDS+=($!)
  listening "${PORT[$1.gateway]}" $! || die "gateway $1 did not start: $(cat "$DIR/gateway-$1.log")"
}

write_nginx_conf() { # INSTANCE
  local i=$1 d="$DIR/nginx-$1" ex="$ROOT/examples/nginx"
  mkdir -p "$d"
  local proxy="proxy_pass http://stub; proxy_http_version 1.1; proxy_set_header Connection \"\";"
  cat >"$d/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections 4096; }
http {
  client_body_temp_path $d/body;
  proxy_temp_path $d/proxy;
  fastcgi_temp_path $d/fastcgi;
  uwsgi_temp_path $d/uwsgi;
  scgi_temp_path $d/scgi;
  access_log off;
  keepalive_requests 1000000;
  log_format keys '\$server_port \$http_x_api_key \$status';
  upstream stub { server 127.0.0.1:${PORT[$i.stub]}; keepalive 32; keepalive_requests 1000000; }
  upstream sluice_gateway {
    server 127.0.0.1:${PORT[$i.gateway]};
    keepalive 32;
    keepalive_requests 1000000;
  }
  limit_req_zone \$http_x_api_key zone=bench:10m rate=100000r/s;
  limit_req_zone \$http_x_api_key zone=audit:10m rate=1r/m;
  limit_req_status 429;

  server { listen 127.0.0.1:${PORT[$i.stub]}; location / { return 200 "ok\n"; } }
  server { listen 127.0.0.1:${PORT[$i.plain]}; location / { $proxy } }
  server {
    listen 127.0.0.1:${PORT[$i.limit_req]};
    location / { limit_req zone=bench burst=1000 nodelay; $proxy }
  }
  server {
    listen 127.0.0.1:${PORT[$i.sluice]};
    include $ex/sluice.conf;
    location / { auth_request /sluice-check; include $ex/sluice-headers.conf; $proxy }
  }
  server {
    listen 127.0.0.1:${PORT[$i.limit_req_audit]};
    access_log $d/audit.log keys;
    location / { limit_req zone=audit burst=$((LIMIT - 1)) nodelay; $proxy }
  }
  server {
    listen 127.0.0.1:${PORT[$i.sluice_audit]};
    access_log $d/audit.log keys;
    include $ex/sluice.conf;
    location / { auth_request /sluice-check; include $ex/sluice-headers.conf; $proxy }
  }
}
CONF
}

declare -A NGINX_PID
start_nginx() { # INSTANCE
  write_nginx_conf "$1"
  taskset -c "$NGINX_CPU" "$NGINX" -p "$DIR/nginx-$1" -c "$DIR/nginx-$1/nginx.conf" \
    >"$DIR/nginx-$1/stderr" 2>&1 &
  NGINX_PID[$1]=$!
  PIDS+=($!)
  listening "${PORT[$1.sluice_audit]}" $! || die "nginx $1 did not start: $(cat "$DIR/nginx-$1/stderr")"
}

for inst in a b; do
  start_gateway "$inst"
  start_nginx "$inst"
done

# ---- 1. overhead ----------------------------------------------------------------------------

cat >"$DIR/keys.lua" <<LUA
math.randomseed(1)
request = function()
  return wrk.format("GET", "/bench/items", { ["X-API-Key"] = "w:" .. math.random($BENCH_KEYS) })
end
LUA

load() { # PORT ARGS...: sluice-load --backend http on CPU NGINX_CPU, JSON on stdout
  local port=$1
  shift
  taskset -c "$NGINX_CPU" "$LOAD" --backend http --servers "127.0.0.1:$port" \
    --key-header X-API-Key --json -q "$@"
}

cat >"$DIR/report.py" <<'PY'
import collections, json, re, statistics, sys

def row(round_, variant, load, wrk):
    r = json.loads(load)
    def wrk_us(label):
        m = re.search(r"^\s*" + re.escape(label) + r"\s+([\d.]+)(us|ms|s)\s*$", wrk, re.M)
        return float(m.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)] if m else -1
    rps = re.search(r"Requests/sec:\s+([\d.]+)", wrk)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", wrk)
    errs = re.search(r"Socket errors:.*", wrk)
    lat = r["latency_us"]
    print(json.dumps({"round": int(round_), "variant": variant, "rate": r["rate"],
        "sent": r["sent"], "allowed": r["allowed"], "denied": r["denied"],
        "errors": r["errors"], "behind": r["behind"], "throughput": r["throughput_per_s"],
        "p50": lat["p50"], "p99": lat["p99"], "p999": lat["p999"], "max": lat["max"],
        "first_error": r.get("first_error", ""),
        "wrk_rps": float(rps.group(1)) if rps else -1, "wrk_p50": wrk_us("50%"),
        "wrk_p99": wrk_us("99%"), "wrk_non2xx": int(non2xx.group(1)) if non2xx else 0,
        "wrk_socket_errors": errs.group(0) if errs else ""}))

def line(text):
    r = json.loads(text)
    out = (f"round {r['round']} {r['variant']:<9} open loop {r['rate']:.0f}/s:"
           f" achieved {r['throughput']:,.0f}/s p50 {r['p50']} us p99 {r['p99']} us"
           f" p99.9 {r['p999']} us max {r['max']} us (sent {r['sent']} allowed {r['allowed']}"
           f" denied {r['denied']} errors {r['errors']} behind {r['behind']});"
           f" wrk {r['wrk_rps']:,.0f}/s p50 {r['wrk_p50']:.0f} us p99 {r['wrk_p99']:.0f} us"
           f" non-2xx {r['wrk_non2xx']}")
    if r["wrk_socket_errors"]: out += " " + r["wrk_socket_errors"]
    if r["first_error"]: out += " first error: " + r["first_error"]
    print(out)

def medians(path, rate):
    rows = [json.loads(l) for l in open(path)]
    med = lambda v, f: statistics.median(r[f] for r in rows if r["variant"] == v)
    print(f"medians of {max(r['round'] for r in rows)} rounds:")
    for v in ("plain", "limit_req", "sluice"):
        print(f"  {v:<9} open loop p50 {med(v, 'p50'):.0f} us p99 {med(v, 'p99'):.0f} us"
              f" p99.9 {med(v, 'p999'):.0f} us achieved {med(v, 'throughput'):,.0f}/s;"
              f" wrk {med(v, 'wrk_rps'):,.0f}/s p50 {med(v, 'wrk_p50'):.0f} us"
              f" p99 {med(v, 'wrk_p99'):.0f} us")
    added = med("sluice", "p99") - med("plain", "p99")
    print(f"sluice adds at p99 over plain nginx at {rate}/s: {added:.0f} us (target < 300 us):"
          f" {'met' if added < 300 else 'MISSED'}")
    print(f"sluice adds at p50: {med('sluice', 'p50') - med('plain', 'p50'):.0f} us;"
          f" limit_req adds at p99: {med('limit_req', 'p99') - med('plain', 'p99'):.0f} us")
    print(f"wrk closed loop, sluice / plain: {med('sluice', 'wrk_rps') / med('plain', 'wrk_rps'):.2f};"
          f" limit_req / plain: {med('limit_req', 'wrk_rps') / med('plain', 'wrk_rps'):.2f}")

def summary(text):
    r = json.loads(text)
    a = r.get("audit", {})
    print(f"sent {r['sent']} allowed {r['allowed']} denied {r['denied']} errors {r['errors']};"
          f" audit keys {a.get('keys_checked')} max overshoot {a.get('max_overshoot_ratio')}")

def per_key(log_a, log_b, port_a, port_b, prefix, keys):
    count = collections.Counter()
    for path in (log_a, log_b):
        for entry in open(path):
            port, key, status = entry.split()
            if port in (port_a, port_b) and key.startswith(prefix) and status == "200":
                count[key] += 1
    spread = collections.Counter(count.values())
    missing = int(keys) - len(count)
    print(f"admitted per key across both nginx (admitted: keys) {dict(sorted(spread.items()))}"
          f"{f', {missing} keys none' if missing else ''}; total {sum(count.values())}")

globals()[sys.argv[1]](*sys.argv[2:])
PY

RESULTS="$DIR/results.jsonl"
: >"$RESULTS"
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), Linux $(uname -r);" \
  "$($NGINX -v 2>&1 | sed 's/.*version: //'); wrk $( (wrk -v 2>&1 || true) | head -1 | awk '{print $2}')"
echo "start: $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "pinning: nginx (2 instances, 1 worker each) and sluice-load/wrk on CPU $NGINX_CPU;" \
  "sluice-gateway (2) and sluiced (1 shard) on CPU $SLUICE_CPU"
# Warm-up, not reported: connections, nginx's and the gateway's first allocations, the keys.
for variant in plain limit_req sluice; do
  load "${PORT[a.$variant]}" --path /bench/items --rate "$RATE" --duration 2s \
    --connections "$CONNS" --keys "$BENCH_KEYS" --key-prefix b: >/dev/null || true
done
for round in $(seq 1 "$ROUNDS"); do
  for variant in plain limit_req sluice; do
    port=${PORT[a.$variant]}
    out=$(load "$port" --path /bench/items --rate "$RATE" --duration "${SECS}s" \
      --connections "$CONNS" --keys "$BENCH_KEYS" --key-prefix b: \
      --algorithm token_bucket --limit 1000000 --period 1s) || true
    wrk_out=$(taskset -c "$NGINX_CPU" wrk -t1 -c"$CONNS" -d"${SECS}s" --latency \
      -s "$DIR/keys.lua" "http://127.0.0.1:$port/bench/items" 2>&1)
    python3 "$DIR/report.py" row "$round" "$variant" "$out" "$wrk_out" >>"$RESULTS"
    python3 "$DIR/report.py" line "$(tail -1 "$RESULTS")"
  done
done
python3 "$DIR/report.py" medians "$RESULTS" "$RATE"

# ---- 2. audit through nginx -----------------------------------------------------------------

REQS=$((KEYS * LIMIT * 3))
audit_run() { # PORT PREFIX: REQS requests, every key 3 x LIMIT times, audited
  load "$1" --path /audit/items --requests "$REQS" --duration 0 --keys "$KEYS" --dist seq \
    --threads 1 --connections "$CONNS" --key-prefix "$2" --audit --audit-keys "$KEYS" \
    --algorithm token_bucket --limit "$LIMIT" --period 1h
}
summary() { python3 "$DIR/report.py" summary "$1"; }
per_key() { # PORT_A PORT_B PREFIX: admitted (200) per key in both access logs together
  python3 "$DIR/report.py" per_key "$DIR/nginx-a/audit.log" "$DIR/nginx-b/audit.log" "$@" "$KEYS"
}
flush_logs() { # the access log line is written (unbuffered) just after the response leaves
  sleep 0.2
}

echo "audit: token bucket $LIMIT per hour per key, $KEYS keys, each asked $((3 * LIMIT)) times per nginx"
out=$(audit_run "${PORT[a.sluice_audit]}" a1:) || true
echo "a. one nginx + sluice: $(summary "$out") (expected allowed $((KEYS * LIMIT)))"

out_a="$DIR/a2-a.json"
out_b="$DIR/a2-b.json"
audit_run "${PORT[a.sluice_audit]}" a2: >"$out_a" &
pa=$!
audit_run "${PORT[b.sluice_audit]}" a2: >"$out_b" &
pb=$!
wait $pa || true
wait $pb || true
flush_logs
echo "b. two nginx sharing one sluiced: nginx a $(summary "$(cat "$out_a")")"
echo "   nginx b $(summary "$(cat "$out_b")")"
echo "   $(per_key "${PORT[a.sluice_audit]}" "${PORT[b.sluice_audit]}" a2:) (expected $LIMIT each)"

audit_run "${PORT[a.limit_req_audit]}" a3: >"$out_a" &
pa=$!
audit_run "${PORT[b.limit_req_audit]}" a3: >"$out_b" &
pb=$!
wait $pa || true
wait $pb || true
flush_logs
echo "c. two nginx with limit_req: nginx a $(summary "$(cat "$out_a")")"
echo "   nginx b $(summary "$(cat "$out_b")")"
echo "   $(per_key "${PORT[a.limit_req_audit]}" "${PORT[b.limit_req_audit]}" a3:) (limit $LIMIT)"
echo "end: $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for inst in a b; do
  if grep -q "auth request unexpected status" "$DIR/nginx-$inst/error.log"; then
    echo "nginx $inst error log: $(grep -c "auth request unexpected status" "$DIR/nginx-$inst/error.log") unexpected auth statuses"
  fi
done
