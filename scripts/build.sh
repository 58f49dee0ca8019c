#!/usr/bin/env bash
# build.sh: installs missing Debian packages, configures and builds strata into build/.
# Extra arguments go to CMake's configure step (e.g. -DSTRATA_CUDA=OFF).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo/scripts/setup.sh"

# ccache keys on relative paths, so fresh clones elsewhere on this machine hit the cache.
export CCACHE_BASEDIR="$repo" CCACHE_NOHASHDIR=true
build="${STRATA_BUILD_DIR:-$repo/build}"
jobs="${STRATA_JOBS:-$(nproc)}"
cmake -S "$repo" -B "$build" -G Ninja "$@" > "$build.configure.log" 2>&1 || {
  cat "$build.configure.log"
  exit 1
}
grep -E "^-- strata:" "$build.configure.log" || true
cmake --build "$build" -j "$jobs"
