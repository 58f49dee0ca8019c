// dist_tensor.cc: DistTensor, CheckPlacements, ShardTensor and SliceBlock.
#include "trainer/auto/dist_tensor.h"

#include <utility>

namespace strata {

Status CheckPlacements(const std::string& name, const Shape& shape, const ProcessMesh& mesh,
                       const std::vector<Placement>& placements) {
  if (static_cast<int>(placements.size()) != mesh.ndim()) {
    return Status::InvalidArgument("tensor '" + name + "': " + std::to_string(placements.size()) +
                                   " placements " + ToString(placements) + " for the " +
                                   std::to_string(mesh.ndim()) + " dimensions of " +
                                   mesh.ToString());
  }
  for (int d = 0; d < mesh.ndim(); ++d) {
    const auto* shard = std::get_if<Shard>(&placements[d]);
    if (shard != nullptr && (shard->axis < 0 || shard->axis >= static_cast<int>(shape.size()))) {
      return Status::InvalidArgument(
          "tensor '" + name + "' of shape " + ShapeToString(shape) + " (rank " +
          std::to_string(shape.size()) + "): " + ToString(placements[d]) + " on mesh dimension '" +
          mesh.dims()[d].name + "' names axis " + std::to_string(shard->axis) +
          ", outside the tensor's rank");
    }
  }
  return Status::OK();
}

Result<DistTensor> DistTensor::Make(std::string name, Tensor local, Shape global_shape,
                                    ProcessMesh mesh, std::vector<Placement> placements,
                                    int mesh_rank) {
  STRATA_RETURN_IF_ERROR(CheckPlacements(name, global_shape, mesh, placements));
  if (mesh_rank < 0 || mesh_rank >= mesh.size()) {
    return Status::InvalidArgument("tensor '" + name + "': rank " + std::to_string(mesh_rank) +
                                   " outside " + mesh.ToString());
  }
  if (!local.defined() || !local.is_cpu() || local.dtype() != DType::kF32 ||
      !local.is_contiguous()) {
    return Status::InvalidArgument("tensor '" + name +
                                   "': the local piece must be a contiguous CPU f32 tensor");
  }
  std::vector<int> coords = mesh.Coords(mesh_rank);
  STRATA_ASSIGN_OR_RETURN(Shape want, LocalShape(global_shape, mesh, placements, coords));
  if (local.shape() != want) {
    return Status::InvalidArgument("tensor '" + name + "': local piece " +
                                   ShapeToString(local.shape()) + " on rank " +
                                   std::to_string(mesh_rank) + ", but " + strata::ToString(placements) +
                                   " of " + ShapeToString(global_shape) + " gives " +
                                   ShapeToString(want));
  }
  DistTensor t;
  t.name_ = std::move(name);
  t.local_ = std::move(local);
  t.global_shape_ = std::move(global_shape);
  t.mesh_ = std::move(mesh);
  t.placements_ = std::move(placements);
  t.mesh_rank_ = mesh_rank;
  t.coords_ = std::move(coords);
  return t;
}

std::string DistTensor::ToString() const {
  return name_ + ": " + ShapeToString(global_shape_) + " on " + mesh_.ToString() + " as " +
         strata::ToString(placements_) + ", local " + ShapeToString(local_.shape());
}

Result<Tensor> SliceBlock(const Tensor& t, const Shape& offset, const Shape& shape) {
  if (static_cast<int>(offset.size()) != t.dim() || static_cast<int>(shape.size()) != t.dim()) {
    return Status::InvalidArgument("SliceBlock of a " + std::to_string(t.dim()) + "-d tensor at " +
                                   ShapeToString(offset) + " of " + ShapeToString(shape));
  }
  Tensor view = t;
  for (int a = 0; a < t.dim(); ++a) {
    if (offset[a] < 0 || shape[a] < 0 || offset[a] + shape[a] > t.size(a)) {
      return Status::InvalidArgument("SliceBlock " + ShapeToString(offset) + " + " +
                                     ShapeToString(shape) + " outside " +
                                     ShapeToString(t.shape()));
    }
    view = view.Narrow(a, offset[a], shape[a]);
  }
  STRATA_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(shape, t.dtype()));
  STRATA_RETURN_IF_ERROR(out.CopyFrom(view));
  return out;
}

Result<DistTensor> ShardTensor(std::string name, const Tensor& dense, const ProcessMesh& mesh,
                               std::vector<Placement> placements, int mesh_rank) {
  STRATA_RETURN_IF_ERROR(CheckPlacements(name, dense.shape(), mesh, placements));
  if (mesh_rank < 0 || mesh_rank >= mesh.size()) {
    return Status::InvalidArgument("tensor '" + name + "': rank " + std::to_string(mesh_rank) +
                                   " outside " + mesh.ToString());
  }
  const std::vector<int> coords = mesh.Coords(mesh_rank);
  STRATA_ASSIGN_OR_RETURN(Shape shape, LocalShape(dense.shape(), mesh, placements, coords));
  STRATA_ASSIGN_OR_RETURN(Shape offset, LocalOffset(dense.shape(), mesh, placements, coords));
  STRATA_ASSIGN_OR_RETURN(Tensor local, SliceBlock(dense, offset, shape));
  for (int d = 0; d < mesh.ndim(); ++d) {
    const auto* partial = std::get_if<Partial>(&placements[d]);
    if (partial != nullptr && partial->op == ReduceOp::kSum && coords[d] != 0) {
      float* p = local.data_as<float>();
      for (int64_t i = 0; i < local.numel(); ++i) p[i] = 0.0f;
    }
  }
  return DistTensor::Make(std::move(name), std::move(local), dense.shape(), mesh,
                          std::move(placements), mesh_rank);
}

}  // namespace strata
