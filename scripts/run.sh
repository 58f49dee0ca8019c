#!/usr/bin/env bash
# run.sh: the main job. Builds strata if needed, then trains the ctr example on a local
# cluster (a scheduler, 2 servers and 2 trainers on loopback, through strata-launch) in hybrid
# mode: the MLP by all-reduce, the embeddings on the servers (DRAM over RocksDB). About half a
# minute on 2 CPU cores; ends with trainer 0's summary (loss, AUC beside the oracle's,
# throughput) and the launcher's. Extra arguments go to strata-launch (e.g. --set train.steps=500).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo/scripts/build.sh" > "$repo/build.log" 2>&1 || { tail -50 "$repo/build.log"; exit 1; }
store="$(mktemp -d /tmp/strata-ctr-store.XXXXXX)"
trap 'rm -rf "$store"' EXIT
"$repo/build/bin/strata-launch" --servers 2 --trainers 2 "$repo/examples/ctr.yaml" \
  --set sync.mode=hybrid --set server.store.path="$store" --set 'train.metrics_path=""' "$@"
