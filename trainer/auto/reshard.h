// reshard.h: Reshard, a DistTensor moved from one set of placements to another on the same mesh
// with the cheapest collective per mesh dimension, planned first as data (PlanReshard: a list of
// steps that can be printed and tested without communicating), then executed over MeshComms.
#pragma once

#include <string>
#include <vector>

#include "common/mesh.h"
#include "trainer/auto/dist_tensor.h"
#include "trainer/auto/mesh_comms.h"

namespace strata {

// One step of a reshard: a change of the placement on one mesh dimension.
//   kAllReduce      Partial(op) -> Replicate
//   kReduceScatter  Partial(op) -> Shard(b)
//   kAllGather      Shard(a)    -> Replicate
//   kAllToAll       Shard(a)    -> Shard(b)
//   kSlice          Replicate   -> Shard(b)      (local, no communication)
//   kPartialize     Replicate   -> Partial(op)   (local: kSum keeps coordinate 0's value and
//                                                 zeroes the others; avg, max, min keep it)
enum class ReshardKind { kAllReduce, kReduceScatter, kAllGather, kAllToAll, kSlice, kPartialize };
std::string_view ReshardKindName(ReshardKind kind);  // "all_reduce", ..., "partialize"

struct ReshardStep {
  ReshardKind kind = ReshardKind::kSlice;
  int mesh_dim = 0;
  Placement from;
  Placement to;
  friend bool operator==(const ReshardStep&, const ReshardStep&) = default;
};
std::string ToString(const ReshardStep& step, const ProcessMesh& mesh);  // "all_gather on y: S(0) -> R"
std::string ToString(const std::vector<ReshardStep>& steps, const ProcessMesh& mesh);

// The steps that take a tensor of `shape` on `mesh` from placements `from` to `to`, in order.
// Pure. Unsharding runs from the fastest mesh dimension to the slowest, sharding from the
// slowest to the fastest, because shards of one tensor axis on several mesh dimensions nest in
// mesh order (common/mesh.h): a dimension keeps its Shard(a) only while no slower dimension
// changes how axis a is split. A Partial -> Shard and a Shard(a) -> Shard(b) become one
// reduce-scatter or all-to-all when axis b is split the same way on every slower dimension
// before and after; otherwise they go through Replicate (all-reduce or all-gather, then a
// slice). Partial(x) -> Partial(y) with x != y is an all-reduce then a partialize.
// InvalidArgument (naming `name`) for placements that do not fit the tensor or the mesh.
Result<std::vector<ReshardStep>> PlanReshard(const std::string& name, const Shape& shape,
                                             const ProcessMesh& mesh,
                                             const std::vector<Placement>& from,
                                             const std::vector<Placement>& to);

// The bytes the rank at `coords` counts (CommStats payloads, ragged pieces padded as Reshard
// pads them) for taking a tensor of `shape` from `from` to `to` on `mesh`: per step of
// PlanReshard's plan, and in all.
Result<std::vector<uint64_t>> ReshardStepBytes(const std::string& name, const Shape& shape,
                                               const ProcessMesh& mesh,
                                               const std::vector<Placement>& from,
                                               const std::vector<Placement>& to,
                                               const std::vector<int>& coords);
Result<uint64_t> ReshardBytes(const std::string& name, const Shape& shape, const ProcessMesh& mesh,
                              const std::vector<Placement>& from, const std::vector<Placement>& to,
                              const std::vector<int>& coords);

// `tensor` with `to` placements on the same mesh, running PlanReshard's steps over `comms` (the
// calling rank's groups on tensor.mesh()). Every rank of the mesh calls it with the same
// arguments but its own piece (the collectives must match). Ragged pieces (a mesh dimension
// that does not divide an axis) are padded to the largest piece in the collective's buffers,
// so the bytes counted are those of equal pieces of ceil(extent / parts) each:
//   all-reduce: the local piece; reduce-scatter: parts * the largest output piece;
//   all-gather: parts * the largest input piece; all-to-all: parts * the largest block.
// Errors name the tensor: placements that do not fit it, comms of another mesh or rank, and
// any communicator failure.
Result<DistTensor> Reshard(const DistTensor& tensor, const std::vector<Placement>& to,
                           MeshComms& comms);

}  // namespace strata
