#!/usr/bin/env bash
# setup.sh: installs exactly the Debian packages strata's build needs; skips what is present.
# Idempotent. Uses sudo when not root. CUDA (nvcc, cuBLAS, NCCL) is not installed here: it is
# picked up from /usr/local/cuda when present (see STRATA_CUDA in CMakeLists.txt).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache git
  libzmq3-dev cppzmq-dev
  capnproto libcapnp-dev
  librocksdb-dev
  libgloo-dev
  libopenblas-dev
  libspdlog-dev libfmt-dev
  libcli11-dev
  libxxhash-dev
  libyaml-cpp-dev
  nlohmann-json3-dev
  libgtest-dev libgmock-dev
  libbenchmark-dev
  clang
  docker-compose
  python3-numpy
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
