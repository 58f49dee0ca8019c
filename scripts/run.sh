#!/usr/bin/env bash
# run.sh: the main job. Builds strata if needed and runs a local cluster on this machine:
# a scheduler, 3 servers and 4 trainers on loopback, through strata-launch.
# Extra arguments go to strata-launch (e.g. --set cluster.trainers=2).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo/scripts/build.sh" > "$repo/build.log" 2>&1 || { tail -50 "$repo/build.log"; exit 1; }
exec "$repo/build/bin/strata-launch" --servers 3 --trainers 4 "$repo/examples/smoke.yaml" "$@"
