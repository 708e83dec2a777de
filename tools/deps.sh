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
  nftables libyaml-cpp-dev
  prometheus-cpp-dev prometheus  # metrics; prometheus for promtool only (never its service)
  nginx-light wrk                # the gateway's nginx test and overhead bench (never a service)
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
# A fresh machine has no package lists; update once, then install.
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
