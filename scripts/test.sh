#!/usr/bin/env bash
# test.sh: the test command. Installs what is missing, builds, and runs every test through
# CTest (labels: unit, integration, gpu; GPU tests skip without a device).
# Extra arguments go to ctest (e.g. -L unit, or -R Scheduler).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo/scripts/build.sh"
cd "$repo/build"
ctest --output-on-failure -j "$(nproc)" --timeout 300 "$@"
