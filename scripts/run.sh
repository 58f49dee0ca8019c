#!/usr/bin/env bash
# run.sh: the main job. Builds strata if needed, then trains the ctr example on a local
# cluster (a scheduler, 2 servers and 2 trainers on loopback, through strata-launch) in hybrid
# mode: the MLP by all-reduce, the embeddings on the servers (DRAM over RocksDB). About half a
# minute on 2 CPU cores. The screen shows the stages, one progress line and the summary table
# (per process: exit, wall time, peak memory; the job's steps, samples/s, loss, AUC beside the
# oracle's); every process's full output goes to build/logs/run.log, the loss and AUC curve to
# build/ctr-loss.png. Extra arguments go to strata-launch (e.g. --set train.steps=500).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/stages.sh"
build="${STRATA_BUILD_DIR:-$repo/build}"
bash "$repo/scripts/build.sh"
store="$(mktemp -d /tmp/strata-ctr-store.XXXXXX)"
trap 'rm -rf "$store"' EXIT
stage "running the ctr job: scheduler, 2 servers, 2 trainers, hybrid (log: $build/logs/run.log)"
"$build/bin/strata-launch" --servers 2 --trainers 2 "$repo/examples/ctr.yaml" \
  --log "$build/logs/run.log" \
  --set sync.mode=hybrid --set server.store.path="$store" --set 'train.metrics_path=""' \
  --set train.plot_path="$build/ctr-loss.png" "$@"
