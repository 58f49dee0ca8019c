#!/usr/bin/env bash
# build.sh: installs missing Debian packages, configures and builds strata into build/, saying
# what it does at each stage: a live [n/N] line on a terminal, a line every ~10% otherwise.
# Full output: <build>/logs/{configure,build}.log (setup's apt logs beside them); on failure
# the log's first error and its path are shown.
# Extra arguments go to CMake's configure step (e.g. -DSTRATA_CUDA=OFF).
# Environment: STRATA_BUILD_DIR (default build/), STRATA_JOBS (default nproc).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/stages.sh"
build="${STRATA_BUILD_DIR:-$repo/build}"
jobs="${STRATA_JOBS:-$(nproc)}"
logs="$build/logs"
mkdir -p "$logs"
STRATA_LOG_DIR="$logs" bash "$repo/scripts/setup.sh"

# ccache keys on relative paths, so fresh clones elsewhere on this machine hit the cache.
export CCACHE_BASEDIR="$repo" CCACHE_NOHASHDIR=true
stage "configuring $build (log: $logs/configure.log)"
logged "$logs/configure.log" cmake -S "$repo" -B "$build" -G Ninja "$@"
grep -E "^-- strata:" "$logs/configure.log" | sed 's/^-- /    /' || true

stage "building with $jobs jobs (log: $logs/build.log)"
start=$SECONDS
set +e
cmake --build "$build" -j "$jobs" 2>&1 | ninja_progress "$logs/build.log"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
  echo "build.sh: the build failed (exit $rc)" >&2
  show_failure "$logs/build.log" '^FAILED:'
  exit "$rc"
fi
if grep -q "no work to do" "$logs/build.log"; then
  stage "build up to date"
else
  stage "built in $((SECONDS - start)) s"
fi
