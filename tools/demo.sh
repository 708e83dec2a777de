#!/usr/bin/env bash
# Installs what is needed, builds, starts sluiced on 127.0.0.1, shows a key being allowed and
# then denied (with its header values) through sluicectl, drives it for a few seconds with
# sluice-load (with an accuracy audit), and stops the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target sluiced sluicectl sluice-load

bin=build/bin
log=$(mktemp)
"$bin/sluiced" --bind 127.0.0.1 --port 0 --shards 2 --max-memory 64MiB >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -f "$log"' EXIT

# The start-up line names the public port: "... listening on 127.0.0.1:PORT (public) ...".
port=""
for _ in $(seq 1 100); do
  port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -n 1)
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "demo: sluiced did not start" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { cat "$log"; echo "demo: no start-up line from sluiced" >&2; exit 1; }
cat "$log"

ctl=("$bin/sluicectl" --servers "127.0.0.1:$port")
echo
echo "\$ sluicectl ping"
"${ctl[@]}" ping
key="demo:user-$$"
statuses=""
for i in 1 2 3 4; do
  echo
  echo "\$ sluicectl acquire $key --algorithm sliding_window --limit 3 --period 60s   # request $i"
  set +e
  "${ctl[@]}" acquire "$key" --algorithm sliding_window --limit 3 --period 60s
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
echo "\$ sluice-load --connections 8 --depth 8 --keys 1000 --limit 100 --period 1s --duration 3s --audit"
"$bin/sluice-load" --servers "127.0.0.1:$port" --connections 8 --depth 8 --keys 1000 \
  --dist zipf:1.1 --algorithm token_bucket --limit 100 --period 1s --duration 3s --audit
echo
echo "\$ sluicectl stats"
"${ctl[@]}" stats
