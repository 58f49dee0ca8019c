#!/usr/bin/env bash
# test.sh: the test command. Installs what is missing, builds, and runs every test through
# CTest (labels: unit, integration, gpu; GPU tests skip without a device), one line per test.
# The full output is kept in <build>/logs/test.log; failing tests' output is shown.
# Extra arguments go to ctest (e.g. -L unit, or -R Scheduler).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/stages.sh"
build="${STRATA_BUILD_DIR:-$repo/build}"
bash "$repo/scripts/build.sh"
count=$(cd "$build" && ctest -N "$@" | sed -n 's/^Total Tests: //p')
stage "running ${count:-the} tests on $(nproc) cores (log: $build/logs/test.log)"
cd "$build"
set +e
ctest --output-on-failure -j "$(nproc)" --timeout 450 "$@" 2>&1 | tee "$build/logs/test.log"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
  echo "test.sh: tests failed (exit $rc); full output: $build/logs/test.log" >&2
else
  stage "all tests passed"
fi
exit "$rc"
