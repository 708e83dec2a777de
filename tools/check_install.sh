#!/usr/bin/env bash
# Installs a build into a temporary prefix and uses it as a C++ project outside this tree would:
# examples/embed built with find_package(Sluice 0.2) and run against a sluiced started here, and
# examples/embed/acquire.cpp built with pkg-config's sluice-client and run the same way. Exits
# non-zero on any difference from the expected answers.
# Usage: tools/check_install.sh BUILD_DIR   (tools/test.sh runs it on build/)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: tools/check_install.sh BUILD_DIR}
work=$(mktemp -d /tmp/sluice-install.XXXXXX)
sluiced_pid=""
cleanup() {
  [ -n "$sluiced_pid" ] && kill "$sluiced_pid" 2>/dev/null && wait "$sluiced_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

echo "== install $build into a temporary prefix"
cmake --install "$build" --prefix "$work/prefix" --component dev >/dev/null
for f in include/sluice/client/client.h include/sluice/rules/rule_set.h \
  include/sluice/core/version.h lib/libsluice_client.a lib/cmake/Sluice/SluiceConfig.cmake \
  lib/pkgconfig/sluice-client.pc; do
  [ -f "$work/prefix/$f" ] || { echo "check_install: $f was not installed" >&2; exit 1; }
done

echo "== every installed header compiles on its own"
headers=()
mapfile -t headers < <(cd "$work/prefix/include/sluice" && find . -name '*.h' | sed 's|^\./||' | sort)
printf '%s\n' "${headers[@]}" | xargs -P "$(nproc)" -I{} sh -c \
  'echo "#include \"{}\"" | g++ -std=c++20 -Wall -Wextra -Werror -fsyntax-only \
     -I "$1" -x c++ - || { echo "check_install: {} does not compile on its own" >&2; exit 255; }' \
  _ "$work/prefix/include/sluice"
echo "${#headers[@]} headers"

echo "== examples/embed with find_package(Sluice 0.2)"
cmake -S examples/embed -B "$work/embed" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror" >/dev/null
cmake --build "$work/embed" >/dev/null

port=$((40000 + RANDOM % 20000))
"$build/bin/sluiced" --bind 127.0.0.1 --port "$port" --shards 1 >"$work/sluiced.log" 2>&1 &
sluiced_pid=$!
for _ in $(seq 1 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done

got=$(printf 'GET /a k1\nGET /b k1\nGET /c k1\nGET /d k1\nGET /a k2\n' |
  "$work/embed/embed_example" examples/embed/rules.yaml "127.0.0.1:$port" | cut -d' ' -f1 |
  tr '\n' ' ')
want="allowed allowed allowed denied allowed "
echo "embed_example: $got"
[ "$got" = "$want" ] || { echo "check_install: expected '$want'" >&2; exit 1; }

echo "== examples/embed/acquire.cpp with pkg-config sluice-client"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
# shellcheck disable=SC2046 # the flags are words
g++ -Wall -Wextra -Werror examples/embed/acquire.cpp $(pkg-config --cflags --libs sluice-client) \
  -o "$work/acquire"
got=$("$work/acquire" "127.0.0.1:$port" pc-key 3 | cut -d' ' -f1 | tr '\n' ' ')
want="allowed allowed denied "
echo "acquire: $got"
[ "$got" = "$want" ] || { echo "check_install: expected '$want'" >&2; exit 1; }
echo "check_install: ok"
