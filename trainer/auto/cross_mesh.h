// cross_mesh.h: ReshardAcrossMeshes, a DistTensor moved from one mesh to another (the seeds'
// stage-to-stage reshard) with point-to-point sends over a communicator that spans both,
// combined with any change of Shard/Replicate placements and Partial targets.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/mesh.h"
#include "trainer/auto/dist_tensor.h"
#include "trainer/comm/communicator.h"

namespace strata {

// A mesh laid on ranks of a wider communicator: ranks[i] is the communicator rank that holds
// mesh rank i. Two spans may share ranks.
struct MeshSpan {
  ProcessMesh mesh = *ProcessMesh::Make({{"x", 1}});
  std::vector<int> ranks;
};

// One point-to-point transfer of a block of the global tensor: from a source mesh rank to a
// destination mesh rank, the block [offset, offset + shape).
struct BlockTransfer {
  int from = 0;  // source mesh rank
  int to = 0;    // destination mesh rank
  Shape offset;
  Shape shape;
};

// The transfers that fill every destination piece exactly once (pure). Among source ranks that
// hold the same block (replicas), the one with coordinate 0 on every Replicate dimension sends.
// Destination Partial dimensions are filled as Replicate (the caller partializes).
// InvalidArgument naming `name` for placements that do not fit, and for Partial sources (reduce
// them on the source mesh first: Reshard to Replicate or Shard).
Result<std::vector<BlockTransfer>> PlanCrossMesh(const std::string& name, const Shape& shape,
                                                 const ProcessMesh& from,
                                                 const std::vector<Placement>& from_placements,
                                                 const ProcessMesh& to,
                                                 const std::vector<Placement>& to_placements);

// Every rank of `comm` that is in `from` or `to` calls it. `piece` is this rank's piece on
// from.mesh (its name, global shape and placements are the tensor's), or null when this rank
// is not in `from` (then `name`, `shape` and `from_placements` say what is moved). Returns this
// rank's piece on to.mesh under `to_placements`, or nullopt when it is not in `to`. Sends and
// receives are posted together (no ordering deadlock); a rank in both meshes copies its own
// blocks. Bytes: each sender counts the blocks it sends, each receiver those it receives
// (CommStats kSend and kRecv on `comm`).
Result<std::optional<DistTensor>> ReshardAcrossMeshes(
    const std::string& name, const Shape& shape, const std::vector<Placement>& from_placements,
    const DistTensor* piece, const MeshSpan& from, const MeshSpan& to,
    const std::vector<Placement>& to_placements, Communicator& comm, uint32_t tag = 0);

}  // namespace strata
