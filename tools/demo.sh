#!/usr/bin/env bash
# Installs what is needed, builds, starts a throwaway single-member etcd and a 3-node Sluice
# cluster in etcd mode on 127.0.0.1, shows one key limited across the nodes (each request
# through a different node), prints `sluicectl cluster`, drives the cluster for 10 s with
# sluice-load (accuracy audited) while one node is killed with kill -9, prints what the load
# saw (errors, the window they fell in, the audit) and `sluicectl cluster` after the failover,
# and then, in front of the cluster: sluice-gateway with examples/rules.yaml and Debian's nginx
# with examples/nginx/sluice.conf, curl through nginx with one API key until 429 (the headers
# printed), the rules edited and reloaded (the new limit in the headers), and a few lines of
# the gateway's and a node's /metrics; then a gateway serving Envoy's Rate Limit Service over
# gRPC with an envoyproxy/ratelimit config, called until OVER_LIMIT. It stops everything it
# started.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/deps.sh curl
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target sluiced sluicectl sluice-load sluice-gateway

bin=build/bin
dir=$(mktemp -d /tmp/sluice-demo.XXXXXX)
pids=()
stop_all() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
trap 'stop_all; rm -rf "$dir"' EXIT

listening() { # PORT PID: until something accepts on PORT (at most 10 s), false if PID exits
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
free() { # PORT...: true when nothing listens on any of them
  local port
  for port in "$@"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 1; fi
  done
}

# etcd: one member, client port E, peer port E + 1, its data in $dir (never the system service).
etcd_port=0
for _ in 1 2 3 4 5 6 7 8 9 10; do
  candidate=$((20000 + (RANDOM % 5000) * 2))
  if free "$candidate" $((candidate + 1)); then
    etcd_port=$candidate
    break
  fi
done
[ "$etcd_port" -ne 0 ] || { echo "demo: no free ports for etcd" >&2; exit 1; }
etcd_url=http://127.0.0.1:$etcd_port
peer_url=http://127.0.0.1:$((etcd_port + 1))
etcd --name demo --data-dir "$dir/etcd" --listen-client-urls "$etcd_url" \
  --advertise-client-urls "$etcd_url" --listen-peer-urls "$peer_url" \
  --initial-advertise-peer-urls "$peer_url" --initial-cluster "demo=$peer_url" \
  --log-level warn >"$dir/etcd.log" 2>&1 &
pids+=($!)
etcd_pid=$!
healthy=0
for _ in $(seq 1 100); do
  if ETCDCTL_API=3 etcdctl --endpoints "$etcd_url" endpoint health >/dev/null 2>&1; then
    healthy=1
    break
  fi
  kill -0 "$etcd_pid" 2>/dev/null || break
  sleep 0.1
done
if ((!healthy)); then
  cat "$dir/etcd.log" >&2
  echo "demo: etcd did not start" >&2
  exit 1
fi
echo "demo: etcd listening on $etcd_url (data in $dir/etcd)"

pick_port() { # BASE: a free port above BASE
  local port
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    port=$(($1 + RANDOM % 5000))
    if free "$port"; then
      echo "$port"
      return 0
    fi
  done
  echo "demo: no free port above $1" >&2
  return 1
}
metrics_port=$(pick_port 40000)

# Three nodes, two shards each: node i listens on port P_i and its shards on P_i + 1, P_i + 2;
# node-0 serves /metrics too.
node_pids=()
ports=()
start_node() { # I: starts node-I on ${ports[I]}
  local http=()
  [ "$1" -eq 0 ] && http=(--http-listen "127.0.0.1:$metrics_port")
  "$bin/sluiced" --bind 127.0.0.1 --port "${ports[$1]}" --shards 2 --max-memory 64MiB \
    --etcd "$etcd_url" --cluster-name demo --node-id "node-$1" "${http[@]}" \
    >>"$dir/node-$1.log" 2>&1 &
  node_pids[$1]=$!
  pids+=($!)
}
for i in 0 1 2; do
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    port=$((30000 + (RANDOM % 3000) * 3))
    if free "$port" $((port + 1)) $((port + 2)); then break; fi
  done
  ports[$i]=$port
  start_node "$i"
done
for i in 0 1 2; do
  if ! listening "${ports[$i]}" "${node_pids[$i]}"; then
    cat "$dir"/node-*.log >&2
    echo "demo: node-$i did not start" >&2
    exit 1
  fi
done
active() { # how many nodes node-0's map has active
  "$bin/sluicectl" --servers "127.0.0.1:${ports[0]}" cluster --json 2>/dev/null |
    grep -o '"state":"active"' | wc -l
}
for _ in $(seq 1 100); do
  [ "$(active)" -eq 3 ] && break
  sleep 0.1
done
if [ "$(active)" -ne 3 ]; then
  cat "$dir"/node-*.log >&2
  echo "demo: the nodes did not all turn active" >&2
  exit 1
fi
for i in 0 1 2; do cat "$dir/node-$i.log"; done
echo
echo "\$ etcdctl --endpoints $etcd_url get --prefix /sluice/demo/members/"
ETCDCTL_API=3 etcdctl --endpoints "$etcd_url" get --prefix /sluice/demo/members/

seeds="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
key="demo:user-$$"
statuses=""
for i in 1 2 3 4; do
  node=$(((i - 1) % 3))
  echo
  echo "\$ sluicectl --servers 127.0.0.1:${ports[$node]} acquire $key --algorithm sliding_window --limit 3 --period 60s   # request $i, through node-$node"
  set +e
  "$bin/sluicectl" --servers "127.0.0.1:${ports[$node]}" acquire "$key" \
    --algorithm sliding_window --limit 3 --period 60s
  status=$?
  set -e
  echo "(exit status $status: $([ $status -eq 0 ] && echo allowed || echo denied))"
  statuses="$statuses$status"
done
if [ "$statuses" != "0001" ]; then
  echo "demo: expected allowed, allowed, allowed, denied; exit statuses were $statuses" >&2
  exit 1
fi
echo
echo "\$ sluicectl --servers $seeds cluster"
"$bin/sluicectl" --servers "$seeds" cluster
echo
echo "\$ sluice-load --servers 127.0.0.1:${ports[0]} --connections 8 --depth 8 --keys 1000 --dist zipf:1.1 --limit 100 --period 1s --duration 10s --audit &"
"$bin/sluice-load" --servers "127.0.0.1:${ports[0]}" --connections 8 --depth 8 --keys 1000 \
  --dist zipf:1.1 --algorithm token_bucket --limit 100 --period 1s --duration 10s --audit \
  >"$dir/load.out" 2>&1 &
load_pid=$!
sleep 3
echo "\$ kill -9 <node-1>   # 3 s into the run: node-1's keys move to their replicas once its lease expires (TTL 2 s)"
kill -9 "${node_pids[1]}"
wait "${node_pids[1]}" 2>/dev/null || true
set +e
wait "$load_pid"
load_status=$?
set -e
cat "$dir/load.out"
echo "(sluice-load exit status $load_status: 1 means some requests failed, here those of node-1's keys until the failover)"
echo
echo "\$ sluicectl --servers 127.0.0.1:${ports[0]} cluster   # after the failover"
"$bin/sluicectl" --servers "127.0.0.1:${ports[0]}" cluster
echo
grep -h -E 'etcd: .*epoch [0-9]+:' "$dir/node-0.log" | tail -n 1 | sed 's/^/node-0: /'

# ---- nginx -> sluice-gateway -> the cluster ---------------------------------------------------
gateway_port=$(pick_port 45000)
nginx_port=$(pick_port 50000)
app_port=$(pick_port 55000)
cp examples/rules.yaml "$dir/rules.yaml"
echo
echo "\$ sluice-gateway --listen 127.0.0.1:$gateway_port --servers 127.0.0.1:${ports[0]},127.0.0.1:${ports[2]} --rules rules.yaml &"
"$bin/sluice-gateway" --listen "127.0.0.1:$gateway_port" \
  --servers "127.0.0.1:${ports[0]},127.0.0.1:${ports[2]}" --rules "$dir/rules.yaml" \
  >"$dir/gateway.log" 2>&1 &
gateway_pid=$!
pids+=($!)
if ! listening "$gateway_port" "$gateway_pid"; then
  cat "$dir/gateway.log" >&2
  echo "demo: sluice-gateway did not start" >&2
  exit 1
fi
cat "$dir/gateway.log"

# nginx in the foreground with its own prefix (never the system service): a stub application on
# app_port, and the public server on nginx_port with examples/nginx/sluice.conf.
mkdir -p "$dir/nginx"
examples=$PWD/examples/nginx
cat >"$dir/nginx/nginx.conf" <<NGINX
daemon off;
master_process off;
pid $dir/nginx/nginx.pid;
error_log $dir/nginx/error.log warn;
events { worker_connections 256; }
http {
  access_log $dir/nginx/access.log;
  client_body_temp_path $dir/nginx/body;
  proxy_temp_path $dir/nginx/proxy;
  fastcgi_temp_path $dir/nginx/fastcgi;
  uwsgi_temp_path $dir/nginx/uwsgi;
  scgi_temp_path $dir/nginx/scgi;
  upstream sluice_gateway { server 127.0.0.1:$gateway_port; keepalive 8; }
  server {
    listen 127.0.0.1:$app_port;
    location / { default_type text/plain; return 200 "hello from the application\n"; }
  }
  server {
    listen 127.0.0.1:$nginx_port;
    include $examples/sluice.conf;
    location / {
      auth_request /sluice-check;
      include $examples/sluice-headers.conf;
      proxy_pass http://127.0.0.1:$app_port;
    }
  }
}
NGINX
nginx -p "$dir/nginx" -c "$dir/nginx/nginx.conf" >"$dir/nginx/stderr.log" 2>&1 &
nginx_pid=$!
pids+=($!)
if ! listening "$nginx_port" "$nginx_pid"; then
  cat "$dir/nginx/stderr.log" "$dir/nginx/error.log" >&2 || true
  echo "demo: nginx did not start" >&2
  exit 1
fi
echo "demo: nginx on 127.0.0.1:$nginx_port in front of a stub application, asking the gateway"

through_nginx() { # KEY: one request through nginx; prints its status line and rate-limit fields
  curl -s -o /dev/null -D - -H "X-API-Key: $1" "http://127.0.0.1:$nginx_port/v1/items" |
    grep -i -E '^HTTP/|^ratelimit|^retry-after' | tr -d '\r'
}
last=""
for i in 1 2 3 4 5 6; do
  echo
  echo "\$ curl -i -H 'X-API-Key: demo-key' http://127.0.0.1:$nginx_port/v1/items   # request $i (5 a minute per key)"
  out=$(through_nginx demo-key)
  echo "$out"
  last=$(echo "$out" | head -n 1)
done
case "$last" in
  *" 429"*) ;;
  *)
    echo "demo: the 6th request was not denied: $last" >&2
    exit 1
    ;;
esac
echo "(nginx's error log: $(wc -l <"$dir/nginx/error.log") lines, none per denial)"

echo
echo "\$ sed -i 's/limit: 5\$/limit: 8/' rules.yaml && kill -HUP <sluice-gateway>   # 8 a minute now"
sed -i 's/limit: 5$/limit: 8/' "$dir/rules.yaml"
kill -HUP "$gateway_pid"
for _ in $(seq 1 50); do
  grep -q 'rules: reloaded' "$dir/gateway.log" && break
  sleep 0.1
done
grep 'rules: reloaded' "$dir/gateway.log" | tail -n 1
echo "\$ curl -i -H 'X-API-Key: another-key' http://127.0.0.1:$nginx_port/v1/items"
out=$(through_nginx another-key)
echo "$out"
if ! echo "$out" | grep -q 'q=8'; then
  echo "demo: the new limit is not in force" >&2
  exit 1
fi

echo
echo "\$ curl -s http://127.0.0.1:$gateway_port/metrics | grep -E '^sluice_gateway_(decisions|requests)_total'"
curl -s "http://127.0.0.1:$gateway_port/metrics" | grep -E '^sluice_gateway_(decisions|requests)_total'
echo "\$ curl -s http://127.0.0.1:$metrics_port/metrics | grep -E '^sluice_(decisions_total|cluster_members|node_fenced)'   # node-0"
curl -s "http://127.0.0.1:$metrics_port/metrics" | grep -E '^sluice_(decisions_total|cluster_members|node_fenced)'

# ---- Envoy's Rate Limit Service: ShouldRateLimit over gRPC --------------------------------------
echo
echo "demo: Envoy's Rate Limit Service: a gateway with --grpc-listen reading an envoyproxy/ratelimit"
echo "config unchanged, asked with tools/rls_call.py (one ShouldRateLimit call each, as Envoy asks)"
cat >"$dir/envoy.yaml" <<'ENVOY'
domain: demo
descriptors:
  - key: api_key
    rate_limit:
      unit: minute
      requests_per_unit: 3
ENVOY
echo "\$ cat envoy.yaml"
cat "$dir/envoy.yaml"
rls_port=$(pick_port 46000)
echo "\$ sluice-gateway --listen 127.0.0.1:$((rls_port + 1)) --grpc-listen 127.0.0.1:$rls_port --servers 127.0.0.1:${ports[0]} --rules envoy.yaml &"
"$bin/sluice-gateway" --listen "127.0.0.1:$((rls_port + 1))" --grpc-listen "127.0.0.1:$rls_port" \
  --servers "127.0.0.1:${ports[0]}" --rules "$dir/envoy.yaml" >"$dir/rls-gateway.log" 2>&1 &
rls_pid=$!
pids+=("$rls_pid")
if ! listening "$rls_port" "$rls_pid"; then
  cat "$dir/rls-gateway.log" >&2
  echo "demo: sluice-gateway --grpc-listen did not start" >&2
  exit 1
fi
over=0
for i in 1 2 3 4 5; do
  echo "\$ tools/rls_call.py 127.0.0.1:$rls_port demo api_key=demo-key   # call $i (3 a minute)"
  rc=0
  tools/rls_call.py "127.0.0.1:$rls_port" demo api_key=demo-key || rc=$?
  if [ "$rc" -eq 1 ]; then
    over=1
    break
  fi
  [ "$rc" -eq 0 ] || exit 1
done
if [ "$over" -ne 1 ]; then
  echo "demo: ShouldRateLimit never answered OVER_LIMIT" >&2
  exit 1
fi

stop_all
echo
echo "demo: stopped nginx, the gateways, etcd and the nodes"
