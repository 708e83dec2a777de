#!/usr/bin/env bash
# Makes the Debian packages of a build with `cpack -G DEB` and checks them as an operator would
# use them: their control fields and contents, an install with dpkg into a throwaway root (not
# this machine's: dpkg --root, dependencies not checked there since that root has none), the
# installed programs run with the installed configs, sluiced from the package serving with
# /etc/sluice/sluiced.conf (its ports moved by flags, which win over the file), and both systemd
# units accepted by `systemd-analyze verify` against that root with no warning.
# Usage: tools/check_packages.sh BUILD_DIR   (tools/test.sh runs it on build/)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: tools/check_packages.sh BUILD_DIR}
build=$(cd "$build" && pwd)
work=$(mktemp -d /tmp/sluice-packages.XXXXXX)
sluiced_pid=""
cleanup() {
  [ -n "$sluiced_pid" ] && kill "$sluiced_pid" 2>/dev/null && wait "$sluiced_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "check_packages: $*" >&2
  exit 1
}

version=$(sed -n 's/^project(sluice VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
arch=$(dpkg --print-architecture)
echo "== cpack -G DEB ($version, $arch)"
if ! (cd "$build" && cpack -G DEB -B "$work/out" >"$work/cpack.log" 2>&1); then
  cat "$work/cpack.log" >&2
  fail "cpack failed"
fi
runtime=$work/out/sluice_${version}_${arch}.deb
dev=$work/out/libsluice-dev_${version}_${arch}.deb
[ -f "$runtime" ] || fail "no $(basename "$runtime") made"
[ -f "$dev" ] || fail "no $(basename "$dev") made"

echo "== control fields"
field() { dpkg-deb --field "$1" "$2"; }
[ "$(field "$runtime" Package)" = sluice ] || fail "sluice: wrong Package"
[ "$(field "$dev" Package)" = libsluice-dev ] || fail "libsluice-dev: wrong Package"
for deb in "$runtime" "$dev"; do
  [ "$(field "$deb" Version)" = "$version" ] || fail "$(basename "$deb"): Version is not $version"
  [ "$(field "$deb" Architecture)" = "$arch" ] || fail "$(basename "$deb"): wrong Architecture"
done
# The runtime's shared libraries, as dpkg-shlibdeps found them.
for lib in libgrpc++1.51 libprotobuf32 libyaml-cpp0.7 libfmt9; do
  field "$runtime" Depends | grep -q "$lib" || fail "sluice does not depend on $lib"
done
field "$dev" Depends | grep -q libfmt-dev || fail "libsluice-dev does not depend on libfmt-dev"
dpkg-deb --ctrl-tarfile "$runtime" | tar -xO ./conffiles >"$work/conffiles"
for f in sluiced.conf gateway.conf rules.yaml; do
  grep -qx "/etc/sluice/$f" "$work/conffiles" || fail "/etc/sluice/$f is not a conffile"
done

echo "== contents"
contents() { dpkg-deb --contents "$1" | awk '{print $6}' | sed 's|^\./|/|'; }
contents "$runtime" >"$work/runtime.list"
contents "$dev" >"$work/dev.list"
for f in /usr/bin/sluiced /usr/bin/sluicectl /usr/bin/sluice-gateway /usr/bin/sluice-load \
  /usr/lib/systemd/system/sluiced.service /usr/lib/systemd/system/sluice-gateway.service \
  /etc/sluice/sluiced.conf /etc/sluice/gateway.conf /etc/sluice/rules.yaml \
  /usr/share/doc/sluice/OPERATIONS.md /usr/share/doc/sluice/sluiced.help.txt; do
  grep -qx "$f" "$work/runtime.list" || fail "sluice lacks $f"
done
for f in /usr/include/sluice/client/client.h /usr/lib/libsluice_client.a \
  /usr/lib/cmake/Sluice/SluiceConfig.cmake /usr/lib/pkgconfig/sluice-client.pc; do
  grep -qx "$f" "$work/dev.list" || fail "libsluice-dev lacks $f"
done
if grep -q '^/usr/include\|^/usr/lib/.*\.a$' "$work/runtime.list"; then
  fail "sluice carries development files"
fi
echo "sluice: $(grep -vc '/$' "$work/runtime.list") files; libsluice-dev: $(grep -vc '/$' "$work/dev.list") files"

echo "== dpkg -i into a throwaway root"
root=$work/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers"
touch "$root/var/lib/dpkg/status"
dpkg --root="$root" --force-not-root --force-depends --log=/dev/null -i "$runtime" "$dev" \
  >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "dpkg -i failed"; }
dpkg --root="$root" -s sluice | grep -q '^Status: install ok installed' || fail "sluice not installed"
dpkg --root="$root" -s libsluice-dev | grep -q '^Status: install ok installed' ||
  fail "libsluice-dev not installed"

echo "== the installed programs with the installed configs"
got=$("$root/usr/bin/sluiced" --config "$root/etc/sluice/sluiced.conf" --version)
[ "$got" = "sluiced $version" ] || fail "sluiced --config ... --version printed '$got'"
echo "$got"
got=$("$root/usr/bin/sluice-gateway" --config "$root/etc/sluice/gateway.conf" --version)
[ "$got" = "sluice-gateway $version" ] || fail "sluice-gateway --config ... --version printed '$got'"
echo "$got"
port=$((40000 + RANDOM % 20000))
"$root/usr/bin/sluiced" --config "$root/etc/sluice/sluiced.conf" --port "$port" --shards 1 \
  --http-listen "127.0.0.1:$((port + 2))" >"$work/sluiced.out" 2>"$work/sluiced.err" &
sluiced_pid=$!
for _ in $(seq 100); do
  grep -q "listening on" "$work/sluiced.out" && break
  kill -0 "$sluiced_pid" 2>/dev/null || { cat "$work/sluiced.err" >&2; fail "sluiced exited"; }
  sleep 0.05
done
grep -q "listening on 127.0.0.1:$port" "$work/sluiced.out" ||
  fail "sluiced did not listen on 127.0.0.1:$port: $(cat "$work/sluiced.out" "$work/sluiced.err")"
"$root/usr/bin/sluicectl" --servers "127.0.0.1:$port" ping >"$work/ping.out" ||
  fail "sluicectl ping: $(cat "$work/ping.out")"
head -n 1 "$work/ping.out"

echo "== systemd-analyze verify"
# The root needs what the units refer to beyond the packages: the targets they are ordered
# against (from this machine's systemd) and /bin/kill (ExecReload).
cp -a /usr/lib/systemd/system/*.target "$root/usr/lib/systemd/system/"
mkdir -p "$root/usr/bin"
ln -s usr/bin "$root/bin"
cp "$(type -P kill)" "$root/usr/bin/kill"
verify=$(systemd-analyze verify --root="$root" /usr/lib/systemd/system/sluiced.service \
  /usr/lib/systemd/system/sluice-gateway.service 2>&1) || fail "systemd-analyze verify: $verify"
[ -z "$verify" ] || fail "systemd-analyze verify warned: $verify"
echo "sluiced.service and sluice-gateway.service verified"
echo "== packages ok"
