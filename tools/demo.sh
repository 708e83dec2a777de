#!/usr/bin/env bash
# Installs what is needed, builds, starts a throwaway single-member etcd and a 3-node Sluice
# cluster in etcd mode on 127.0.0.1, shows one key limited across the nodes (each request
# through a different node), prints `sluicectl cluster`, drives the cluster for 10 s with
# sluice-load (accuracy audited) while one node is killed with kill -9, prints what the load
# saw (errors, the window they fell in, the audit) and `sluicectl cluster` after the failover,
# and stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target sluiced sluicectl sluice-load

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

# Three nodes, two shards each: node i listens on port P_i and its shards on P_i + 1, P_i + 2.
node_pids=()
ports=()
start_node() { # I: starts node-I on ${ports[I]}
  "$bin/sluiced" --bind 127.0.0.1 --port "${ports[$1]}" --shards 2 --max-memory 64MiB \
    --etcd "$etcd_url" --cluster-name demo --node-id "node-$1" >>"$dir/node-$1.log" 2>&1 &
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
grep -h 'etcd: epoch' "$dir/node-0.log" | tail -n 1 | sed 's/^/node-0: /'
stop_all
echo
echo "demo: stopped etcd and the nodes"
