#!/usr/bin/env bash
# Installs the Debian packages Sluice needs to build, test and benchmark, plus any packages
# given as arguments (tools/test.sh adds clang-format, clang and libclang-rt-14-dev).
# Idempotent: does nothing (and prints nothing) when everything is already there.
set -euo pipefail

packages=(
  g++ cmake ninja-build
  libboost-dev libboost-program-options-dev
  libfmt-dev catch2 libbenchmark-dev libxxhash-dev
  nlohmann-json3-dev etcd-server etcd-client
  nftables libyaml-cpp-dev pkgconf
  prometheus-cpp-dev prometheus  # metrics; prometheus for promtool only (never its service)
  nginx-light wrk                # the gateway's nginx test and overhead bench (never a service)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler  # RLS: messages, load
  libnghttp2-dev                   # HTTP/2 under the gateway's gRPC server (RLS front)
  python3-grpcio python3-protobuf  # a gRPC client that is not ours, for the RLS tests
  dpkg-dev systemd                 # cpack -G DEB (dpkg-shlibdeps), systemd-analyze verify
)
[ "$#" -gt 0 ] && packages+=("$@")

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ "${#missing[@]}" -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# etcd, nginx and prometheus come with system services that their packages start where an init
# system runs; the tests start their own on loopback ports and never want those. A policy-rc.d
# that answers 101 ("action forbidden") keeps the install from starting any service; it is
# removed afterwards, however the script ends (unless the machine already had one). The units
# stay enabled where systemd runs: on such a machine, disable them (systemctl disable etcd nginx
# prometheus) or they start at the next boot.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
  own_policy=1
  trap '[ "$own_policy" -eq 1 ] && $sudo rm -f "$policy"' EXIT
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod +x "$policy"
fi
# A fresh machine has no package lists; update once, then install.
status=0
$sudo apt-get update -qq >/dev/null &&
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || status=$?
exit "$status"
