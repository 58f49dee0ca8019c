#!/usr/bin/env bash
# setup.sh: installs exactly the Debian packages strata's build needs; skips what is present.
# Idempotent. Uses sudo when not root. CUDA (nvcc, cuBLAS, NCCL) is not installed here: it is
# picked up from /usr/local/cuda when present (see STRATA_CUDA in CMakeLists.txt).
# apt's output goes to files under $STRATA_LOG_DIR (default /tmp/strata-logs); on failure their
# tail and path are shown.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/stages.sh"

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
  gnuplot-nox
  libcpp-httplib-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  stage "all ${#packages[@]} Debian packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
logs="${STRATA_LOG_DIR:-/tmp/strata-logs}"
stage "installing ${#missing[@]} of ${#packages[@]} Debian packages: ${missing[*]}"
stage "  apt-get update (log: $logs/apt-update.log)"
export DEBIAN_FRONTEND=noninteractive
logged "$logs/apt-update.log" $sudo apt-get update
stage "  apt-get install (log: $logs/apt-install.log)"
logged "$logs/apt-install.log" $sudo apt-get install -y --no-install-recommends "${missing[@]}"
stage "installed ${#missing[@]} packages"
