#!/usr/bin/env bash
# check_layers.sh: fails if an #include crosses a layer the wrong way (docs/architecture.md):
#   common <- cluster <- ps <- trainer;  common <- offload <- ps;  cluster <- trainer/comm
# and if anything outside offload/ includes offload/internal/ (strata-bench's raw-RocksDB
# baseline excepted). Run by CTest (unit.LayerIncludes).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
status=0
# forbid <folder> <include prefix regex> <why>
forbid() {
  local hits
  hits=$(grep -rnE "#include \"($2)" "$1" --include='*.h' --include='*.cc' --include='*.cu' \
         2>/dev/null)
  if [ -n "$hits" ]; then
    echo "check_layers: $1 must not include $2 ($3):"
    echo "$hits"
    status=1
  fi
}
forbid common 'cluster/|offload/|ps/|trainer/|tools/' "common is the bottom layer"
forbid cluster 'offload/|ps/|trainer/|tools/' "cluster sits on common only"
forbid offload 'cluster/|ps/|trainer/|tools/' "offload sits on common only"
forbid ps 'trainer/|tools/|offload/internal/' "ps sits on cluster, offload's public headers, common"
forbid trainer/comm 'ps/|offload/' "collectives need membership, not the parameter server"
forbid trainer 'tools/|offload/internal/' "trainer sits below tools"
hits=$(grep -rnE '#include "offload/internal/' --include='*.h' --include='*.cc' . 2>/dev/null |
       grep -vE '^\./(offload/|build)' | grep -v '^\./tools/bench/store_bench.cc:')
if [ -n "$hits" ]; then
  echo "check_layers: offload/internal/ is offload's own:"
  echo "$hits"
  status=1
fi
[ $status -eq 0 ] && echo "check_layers: ok"
exit $status
