// cross_mesh.cc: PlanCrossMesh (which source rank sends which block to which destination rank)
// and ReshardAcrossMeshes (posting those transfers and assembling the destination pieces).
#include "trainer/auto/cross_mesh.h"

#include <algorithm>
#include <memory>
#include <utility>

namespace strata {
namespace {

struct Box {
  Shape offset;
  Shape shape;
};

Result<Box> BoxOf(const Shape& shape, const ProcessMesh& mesh,
                  const std::vector<Placement>& placements, int mesh_rank) {
  const std::vector<int> coords = mesh.Coords(mesh_rank);
  Box box;
  STRATA_ASSIGN_OR_RETURN(box.offset, LocalOffset(shape, mesh, placements, coords));
  STRATA_ASSIGN_OR_RETURN(box.shape, LocalShape(shape, mesh, placements, coords));
  return box;
}

// The common block of two boxes; nullopt when it holds no element.
std::optional<Box> Intersect(const Box& a, const Box& b) {
  Box c{Shape(a.offset.size()), Shape(a.offset.size())};
  for (size_t i = 0; i < a.offset.size(); ++i) {
    const int64_t lo = std::max(a.offset[i], b.offset[i]);
    const int64_t hi = std::min(a.offset[i] + a.shape[i], b.offset[i] + b.shape[i]);
    if (hi <= lo) return std::nullopt;
    c.offset[i] = lo;
    c.shape[i] = hi - lo;
  }
  return c;
}

std::vector<Placement> WithoutPartials(std::vector<Placement> placements) {
  for (Placement& p : placements) {
    if (std::holds_alternative<Partial>(p)) p = Replicate{};
  }
  return placements;
}

Shape Minus(const Shape& a, const Shape& b) {
  Shape c(a.size());
  for (size_t i = 0; i < a.size(); ++i) c[i] = a[i] - b[i];
  return c;
}

Tensor Block(const Tensor& t, const Shape& offset, const Shape& shape) {
  Tensor view = t;
  for (int a = 0; a < t.dim(); ++a) view = view.Narrow(a, offset[a], shape[a]);
  return view;
}

int IndexOf(const std::vector<int>& ranks, int rank) {
  const auto it = std::find(ranks.begin(), ranks.end(), rank);
  return it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
}

}  // namespace

Result<std::vector<BlockTransfer>> PlanCrossMesh(const std::string& name, const Shape& shape,
                                                 const ProcessMesh& from,
                                                 const std::vector<Placement>& from_placements,
                                                 const ProcessMesh& to,
                                                 const std::vector<Placement>& to_placements) {
  STRATA_RETURN_IF_ERROR(CheckPlacements(name, shape, from, from_placements));
  STRATA_RETURN_IF_ERROR(CheckPlacements(name, shape, to, to_placements));
  for (const Placement& p : from_placements) {
    if (std::holds_alternative<Partial>(p)) {
      return Status::InvalidArgument("tensor '" + name + "' is " + ToString(from_placements) +
                                     " on the source mesh: reduce its Partial dimensions there "
                                     "(Reshard) before moving it to another mesh");
    }
  }
  const std::vector<Placement> dst = WithoutPartials(to_placements);
  std::vector<BlockTransfer> transfers;
  for (int s = 0; s < from.size(); ++s) {
    const std::vector<int> coords = from.Coords(s);
    bool sender = true;
    for (int d = 0; d < from.ndim(); ++d) {
      if (std::holds_alternative<Replicate>(from_placements[d]) && coords[d] != 0) sender = false;
    }
    if (!sender) continue;
    STRATA_ASSIGN_OR_RETURN(Box src, BoxOf(shape, from, from_placements, s));
    for (int t = 0; t < to.size(); ++t) {
      STRATA_ASSIGN_OR_RETURN(Box want, BoxOf(shape, to, dst, t));
      if (std::optional<Box> common = Intersect(src, want)) {
        transfers.push_back({s, t, common->offset, common->shape});
      }
    }
  }
  return transfers;
}

Result<std::optional<DistTensor>> ReshardAcrossMeshes(
    const std::string& name, const Shape& shape, const std::vector<Placement>& from_placements,
    const DistTensor* piece, const MeshSpan& from, const MeshSpan& to,
    const std::vector<Placement>& to_placements, Communicator& comm, uint32_t tag) {
  auto fail = [&](Status s) {
    return s.WithContext("moving tensor '" + name + "' from " + from.mesh.ToString() + " to " +
                         to.mesh.ToString());
  };
  if (static_cast<int>(from.ranks.size()) != from.mesh.size() ||
      static_cast<int>(to.ranks.size()) != to.mesh.size()) {
    return fail(Status::InvalidArgument("a mesh span lists a rank for each mesh rank"));
  }
  const int me = comm.rank();
  const int src = IndexOf(from.ranks, me), dst = IndexOf(to.ranks, me);
  if (src >= 0 && (piece == nullptr || piece->mesh_rank() != src ||
                   piece->global_shape() != shape || piece->placements() != from_placements)) {
    return fail(Status::InvalidArgument("rank " + std::to_string(me) +
                                        " is on the source mesh but passed no matching piece"));
  }
  Result<std::vector<BlockTransfer>> planned =
      PlanCrossMesh(name, shape, from.mesh, from_placements, to.mesh, to_placements);
  if (!planned.ok()) return fail(planned.status());

  Box src_box, dst_box;
  Tensor out;
  if (src >= 0) {
    STRATA_ASSIGN_OR_RETURN(src_box, BoxOf(shape, from.mesh, from_placements, src));
  }
  if (dst >= 0) {
    STRATA_ASSIGN_OR_RETURN(dst_box, BoxOf(shape, to.mesh, WithoutPartials(to_placements), dst));
    STRATA_ASSIGN_OR_RETURN(out, Tensor::Zeros(dst_box.shape, DType::kF32));
  }
  // Posted transfers with their buffers, which must outlive the requests.
  std::vector<std::pair<Tensor, const BlockTransfer*>> received;
  std::vector<Tensor> sent;
  std::vector<std::unique_ptr<Communicator::Request>> requests;
  for (const BlockTransfer& t : *planned) {
    const int sender = from.ranks[t.from], receiver = to.ranks[t.to];
    if (sender != me && receiver != me) continue;
    if (sender == me && receiver == me) {
      Status s = Block(out, Minus(t.offset, dst_box.offset), t.shape)
                     .CopyFrom(Block(piece->local(), Minus(t.offset, src_box.offset), t.shape));
      if (!s.ok()) return fail(s);
      continue;
    }
    Result<std::unique_ptr<Communicator::Request>> r = Status::Internal("not posted");
    if (sender == me) {
      STRATA_ASSIGN_OR_RETURN(Tensor block,
                              SliceBlock(piece->local(), Minus(t.offset, src_box.offset), t.shape));
      r = comm.ISend(block.data_as<float>(), block.numel(), receiver, tag);
      sent.push_back(std::move(block));
    } else {
      STRATA_ASSIGN_OR_RETURN(Tensor block, Tensor::Empty(t.shape, DType::kF32));
      r = comm.IRecv(block.data_as<float>(), block.numel(), sender, tag);
      received.emplace_back(std::move(block), &t);
    }
    if (!r.ok()) return fail(r.status());
    requests.push_back(std::move(*r));
  }
  for (auto& r : requests) {
    if (Status s = r->Wait(); !s.ok()) return fail(s);
  }
  if (dst < 0) return std::optional<DistTensor>();
  for (const auto& [block, t] : received) {
    if (Status s = Block(out, Minus(t->offset, dst_box.offset), t->shape).CopyFrom(block);
        !s.ok()) {
      return fail(s);
    }
  }
  const std::vector<int> coords = to.mesh.Coords(dst);
  for (int d = 0; d < to.mesh.ndim(); ++d) {
    const auto* partial = std::get_if<Partial>(&to_placements[d]);
    if (partial != nullptr && partial->op == ReduceOp::kSum && coords[d] != 0) {
      std::fill_n(out.data_as<float>(), out.numel(), 0.0f);
    }
  }
  STRATA_ASSIGN_OR_RETURN(DistTensor result, DistTensor::Make(name, std::move(out), shape, to.mesh,
                                                              to_placements, dst));
  return std::optional<DistTensor>(std::move(result));
}

}  // namespace strata
