// dist_tensor.h: DistTensor (a rank's local piece of a global tensor placed on a ProcessMesh,
// one placement per mesh dimension) and ShardTensor, which cuts a dense tensor into the piece a
// rank holds. Placements, their local shapes and offsets are common/mesh.h's.
#pragma once

#include <string>
#include <vector>

#include "common/mesh.h"
#include "common/status.h"
#include "common/tensor.h"

namespace strata {

// A value (like Tensor, copying it shares the local elements). The local tensor is contiguous
// f32 on the CPU (what the Gloo communicators move) and its shape is exactly
// LocalShape(global_shape, mesh, placements, coords): sizes a mesh dimension does not divide
// give ragged pieces, the first global % parts of them one larger (common/mesh.h's EvenChunk).
// Along a Partial(op) mesh dimension every coordinate holds a full-extent piece and the tensor's
// value is `op` over them.
class DistTensor {
 public:
  DistTensor() = default;

  // InvalidArgument naming `name` when a placement does not fit the tensor (a Shard axis past
  // its rank), the count of placements is not the mesh's, `mesh_rank` is outside the mesh, or
  // `local` is not the piece's shape or not contiguous CPU f32.
  static Result<DistTensor> Make(std::string name, Tensor local, Shape global_shape,
                                 ProcessMesh mesh, std::vector<Placement> placements,
                                 int mesh_rank);

  const std::string& name() const { return name_; }
  const Tensor& local() const { return local_; }
  const Shape& global_shape() const { return global_shape_; }
  const ProcessMesh& mesh() const { return mesh_; }
  const std::vector<Placement>& placements() const { return placements_; }
  int mesh_rank() const { return mesh_rank_; }
  const std::vector<int>& coords() const { return coords_; }

  // "x: [8, 6] on ProcessMesh(x=2, y=2) as [S(0), P(sum)], local [4, 6]"
  std::string ToString() const;

 private:
  std::string name_;
  Tensor local_;
  Shape global_shape_;
  ProcessMesh mesh_ = *ProcessMesh::Make({{"x", 1}});
  std::vector<Placement> placements_;
  int mesh_rank_ = 0;
  std::vector<int> coords_;
};

// OK when `placements` can place a tensor of `shape` on `mesh`: one per mesh dimension, every
// Shard axis within the tensor's rank. Errors name the tensor, the axis and the rank.
Status CheckPlacements(const std::string& name, const Shape& shape, const ProcessMesh& mesh,
                       const std::vector<Placement>& placements);

// The piece of `dense` (contiguous CPU f32, the global tensor) that `mesh_rank` holds under
// `placements`: a slice along Shard dimensions; along a Partial(op) dimension, for kSum the
// coordinate 0 holds the value and the others zeros, for kAvg, kMax and kMin every coordinate
// holds the value (so the reduction gives it back). No communication.
Result<DistTensor> ShardTensor(std::string name, const Tensor& dense, const ProcessMesh& mesh,
                               std::vector<Placement> placements, int mesh_rank);

// A contiguous copy of `t`'s block [offset, offset + shape) (one entry per axis).
Result<Tensor> SliceBlock(const Tensor& t, const Shape& offset, const Shape& shape);

}  // namespace strata
