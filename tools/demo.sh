#!/usr/bin/env bash
# Installs what is needed, builds, starts a 3-node Sluice cluster on 127.0.0.1 from a static
# cluster file, shows one key limited across the nodes (each request through a different node),
# drives the cluster for 10 s with sluice-load (with its accuracy audit), prints the cluster map
# with `sluicectl cluster`, and stops every node it started.
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

# Three nodes, two shards each: node i listens on port P_i and its shards on P_i + 1, P_i + 2.
# Ports are drawn at random from 20000-49999; if one is taken, every node starts again on new
# ones (at most five tries).
listening() { # PORT PID: until the node accepts (at most 10 s), false if it exits
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
ports=()
started=0
for attempt in 1 2 3 4 5; do
  ports=($((20000 + (RANDOM % 3333) * 9)) $((20003 + (RANDOM % 3333) * 9)) $((20006 + (RANDOM % 3333) * 9)))
  {
    echo "# the demo's cluster: one 'ID HOST:PORT' per node"
    echo "epoch 1"
    for i in 0 1 2; do echo "node-$i 127.0.0.1:${ports[$i]}"; done
  } >"$dir/cluster.conf"
  ok=1
  for i in 0 1 2; do
    "$bin/sluiced" --bind 127.0.0.1 --port "${ports[$i]}" --shards 2 --max-memory 64MiB \
      --cluster "$dir/cluster.conf" --node-id "node-$i" >"$dir/node-$i.log" 2>&1 &
    pids+=($!)
  done
  for i in 0 1 2; do listening "${ports[$i]}" "${pids[$i]}" || ok=0; done
  if ((ok)); then
    started=1
    break
  fi
  echo "demo: a port was taken (try $attempt); starting again on other ports" >&2
  stop_all
done
if ((!started)); then
  cat "$dir"/node-*.log >&2
  echo "demo: the nodes did not start" >&2
  exit 1
fi
echo "\$ cat cluster.conf"
cat "$dir/cluster.conf"
for i in 0 1 2; do head -n 2 "$dir/node-$i.log"; done

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
echo "\$ sluice-load --servers 127.0.0.1:${ports[0]} --connections 8 --depth 8 --keys 1000 --dist zipf:1.1 --limit 100 --period 1s --duration 10s --audit"
"$bin/sluice-load" --servers "127.0.0.1:${ports[0]}" --connections 8 --depth 8 --keys 1000 \
  --dist zipf:1.1 --algorithm token_bucket --limit 100 --period 1s --duration 10s --audit
echo
echo "\$ sluicectl --servers $seeds cluster"
"$bin/sluicectl" --servers "$seeds" cluster
stop_all
echo
echo "demo: stopped the three nodes"
