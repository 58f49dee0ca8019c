// reshard.cc: PlanReshard (which collective per mesh dimension, in which order) and Reshard
// (each step's local packing around the Communicator's collective).
#include "trainer/auto/reshard.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace strata {
namespace {

bool IsShardOn(const Placement& p, int axis) {
  const auto* s = std::get_if<Shard>(&p);
  return s != nullptr && s->axis == axis;
}

int ShardAxis(const Placement& p) {
  const auto* s = std::get_if<Shard>(&p);
  return s == nullptr ? -1 : s->axis;
}

// The first mesh dimension on which `from` and `to` split `axis` differently (ndim if none):
// shards of `axis` on that dimension and faster ones cannot stay as they are.
int FirstChange(const std::vector<Placement>& from, const std::vector<Placement>& to, int axis) {
  for (size_t d = 0; d < from.size(); ++d) {
    if (IsShardOn(from[d], axis) != IsShardOn(to[d], axis)) return static_cast<int>(d);
  }
  return static_cast<int>(from.size());
}

int64_t Product(const Shape& shape, int skip_a, int skip_b = -1) {
  int64_t n = 1;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    if (i != skip_a && i != skip_b) n *= shape[i];
  }
  return n;
}

// A tensor of `shape` over `data` (not owned; the caller keeps it alive).
Tensor View(float* data, Shape shape) {
  return Tensor::FromBlob(data, std::move(shape), DType::kF32, Device::CPU(), nullptr);
}

Status Fail(const DistTensor& t, const ReshardStep& step, Status s) {
  return s.WithContext("resharding tensor '" + t.name() + "' (" +
                       ToString(step, t.mesh()) + ")");
}

// The state of a reshard in progress: the local piece and the placements it has now.
struct Piece {
  Tensor local;
  std::vector<Placement> placements;
};

// The extent of `axis` that mesh dimension `d` splits: the piece's extent with dimension d
// replicated.
Result<int64_t> LevelExtent(const DistTensor& t, const Piece& piece, int d, int axis) {
  std::vector<Placement> p = piece.placements;
  p[d] = Replicate{};
  STRATA_ASSIGN_OR_RETURN(Shape shape, LocalShape(t.global_shape(), t.mesh(), p, t.coords()));
  return shape[axis];
}

Status AllReduceStep(Communicator& c, Piece& piece, ReduceOp op) {
  STRATA_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(piece.local.shape(), DType::kF32));
  STRATA_RETURN_IF_ERROR(out.CopyFrom(piece.local));
  STRATA_RETURN_IF_ERROR(c.AllReduce(out.data_as<float>(), out.numel(), op));
  piece.local = std::move(out);
  return Status::OK();
}

Status ReduceScatterStep(Communicator& c, Piece& piece, ReduceOp op, int axis) {
  const int parts = c.size();
  const Shape& shape = piece.local.shape();
  const int64_t extent = shape[axis], rest = Product(shape, axis);
  const int64_t block = EvenChunk(extent, parts, 0).length * rest;
  std::vector<float> in(parts * block, 0.0f), out(block);
  for (int j = 0; j < parts; ++j) {
    const Chunk chunk = EvenChunk(extent, parts, j);
    Shape cs = shape;
    cs[axis] = chunk.length;
    STRATA_RETURN_IF_ERROR(
        View(in.data() + j * block, cs).CopyFrom(piece.local.Narrow(axis, chunk.offset, chunk.length)));
  }
  STRATA_RETURN_IF_ERROR(c.ReduceScatter(in.data(), out.data(), block, op));
  Shape mine = shape;
  mine[axis] = EvenChunk(extent, parts, c.rank()).length;
  STRATA_ASSIGN_OR_RETURN(Tensor result, Tensor::Empty(mine, DType::kF32));
  STRATA_RETURN_IF_ERROR(result.CopyFrom(View(out.data(), mine)));
  piece.local = std::move(result);
  return Status::OK();
}

Status AllGatherStep(Communicator& c, Piece& piece, int axis, int64_t level) {
  const int parts = c.size();
  const Shape& shape = piece.local.shape();
  const int64_t rest = Product(shape, axis);
  const int64_t block = EvenChunk(level, parts, 0).length * rest;
  std::vector<float> in(block, 0.0f), out(parts * block);
  if (piece.local.numel() > 0) {
    std::memcpy(in.data(), piece.local.data(), piece.local.nbytes());
  }
  STRATA_RETURN_IF_ERROR(c.AllGather(in.data(), out.data(), block));
  Shape whole = shape;
  whole[axis] = level;
  STRATA_ASSIGN_OR_RETURN(Tensor result, Tensor::Empty(whole, DType::kF32));
  for (int r = 0; r < parts; ++r) {
    const Chunk chunk = EvenChunk(level, parts, r);
    Shape cs = shape;
    cs[axis] = chunk.length;
    STRATA_RETURN_IF_ERROR(
        result.Narrow(axis, chunk.offset, chunk.length).CopyFrom(View(out.data() + r * block, cs)));
  }
  piece.local = std::move(result);
  return Status::OK();
}

// Split axis `to` into parts and send part j to rank j; gather axis `from` from every rank.
Status AllToAllStep(Communicator& c, Piece& piece, int from, int to, int64_t level) {
  const int parts = c.size(), me = c.rank();
  const Shape& shape = piece.local.shape();
  const int64_t extent_to = shape[to];
  const int64_t block = EvenChunk(level, parts, 0).length *
                        EvenChunk(extent_to, parts, 0).length * Product(shape, from, to);
  std::vector<float> in(parts * block, 0.0f), out(parts * block);
  for (int j = 0; j < parts; ++j) {
    const Chunk chunk = EvenChunk(extent_to, parts, j);
    Shape cs = shape;
    cs[to] = chunk.length;
    STRATA_RETURN_IF_ERROR(
        View(in.data() + j * block, cs).CopyFrom(piece.local.Narrow(to, chunk.offset, chunk.length)));
  }
  STRATA_RETURN_IF_ERROR(c.AllToAll(in.data(), out.data(), block));
  Shape result_shape = shape;
  result_shape[from] = level;
  result_shape[to] = EvenChunk(extent_to, parts, me).length;
  STRATA_ASSIGN_OR_RETURN(Tensor result, Tensor::Empty(result_shape, DType::kF32));
  for (int r = 0; r < parts; ++r) {
    const Chunk chunk = EvenChunk(level, parts, r);
    Shape cs = result_shape;
    cs[from] = chunk.length;
    STRATA_RETURN_IF_ERROR(result.Narrow(from, chunk.offset, chunk.length)
                               .CopyFrom(View(out.data() + r * block, cs)));
  }
  piece.local = std::move(result);
  return Status::OK();
}

Status SliceStep(Piece& piece, int axis, int parts, int coord) {
  const Chunk chunk = EvenChunk(piece.local.size(axis), parts, coord);
  Shape offset(piece.local.dim(), 0), shape = piece.local.shape();
  offset[axis] = chunk.offset;
  shape[axis] = chunk.length;
  STRATA_ASSIGN_OR_RETURN(piece.local, SliceBlock(piece.local, offset, shape));
  return Status::OK();
}

Status PartializeStep(Piece& piece, ReduceOp op, int coord) {
  STRATA_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(piece.local.shape(), DType::kF32));
  STRATA_RETURN_IF_ERROR(out.CopyFrom(piece.local));
  if (op == ReduceOp::kSum && coord != 0) {
    std::fill_n(out.data_as<float>(), out.numel(), 0.0f);
  }
  piece.local = std::move(out);
  return Status::OK();
}

}  // namespace

std::string_view ReshardKindName(ReshardKind kind) {
  switch (kind) {
    case ReshardKind::kAllReduce:
      return "all_reduce";
    case ReshardKind::kReduceScatter:
      return "reduce_scatter";
    case ReshardKind::kAllGather:
      return "all_gather";
    case ReshardKind::kAllToAll:
      return "all_to_all";
    case ReshardKind::kSlice:
      return "slice";
    case ReshardKind::kPartialize:
      return "partialize";
  }
  return "?";
}

std::string ToString(const ReshardStep& step, const ProcessMesh& mesh) {
  return std::string(ReshardKindName(step.kind)) + " on " + mesh.dims()[step.mesh_dim].name +
         ": " + ToString(step.from) + " -> " + ToString(step.to);
}

std::string ToString(const std::vector<ReshardStep>& steps, const ProcessMesh& mesh) {
  std::string s;
  for (const ReshardStep& step : steps) {
    if (!s.empty()) s += "; ";
    s += ToString(step, mesh);
  }
  return s.empty() ? "nothing" : s;
}

Result<std::vector<ReshardStep>> PlanReshard(const std::string& name, const Shape& shape,
                                             const ProcessMesh& mesh,
                                             const std::vector<Placement>& from,
                                             const std::vector<Placement>& to) {
  STRATA_RETURN_IF_ERROR(CheckPlacements(name, shape, mesh, from));
  STRATA_RETURN_IF_ERROR(CheckPlacements(name, shape, mesh, to));
  std::vector<ReshardStep> steps;
  std::vector<Placement> now = from;
  // Unshard, fastest dimension first.
  for (int d = mesh.ndim() - 1; d >= 0; --d) {
    const Placement& want = to[d];
    const int want_axis = ShardAxis(want);
    const bool direct = want_axis >= 0 && FirstChange(from, to, want_axis) == d;
    if (std::holds_alternative<Partial>(now[d])) {
      if (now[d] == want) continue;
      if (direct) {
        steps.push_back({ReshardKind::kReduceScatter, d, now[d], want});
        now[d] = want;
      } else {
        steps.push_back({ReshardKind::kAllReduce, d, now[d], Replicate{}});
        now[d] = Replicate{};
      }
    } else if (const int axis = ShardAxis(now[d]); axis >= 0) {
      if (now[d] == want && d < FirstChange(from, to, axis)) continue;
      if (direct && want_axis != axis) {
        steps.push_back({ReshardKind::kAllToAll, d, now[d], want});
        now[d] = want;
      } else {
        steps.push_back({ReshardKind::kAllGather, d, now[d], Replicate{}});
        now[d] = Replicate{};
      }
    }
  }
  // Shard and partialize, slowest dimension first.
  for (int d = 0; d < mesh.ndim(); ++d) {
    if (now[d] == to[d]) continue;
    STRATA_CHECK(std::holds_alternative<Replicate>(now[d]))
        << name << ": " << ToString(now[d]) << " left on dimension " << d << " planning "
        << ToString(from) << " -> " << ToString(to);
    const ReshardKind kind =
        std::holds_alternative<Shard>(to[d]) ? ReshardKind::kSlice : ReshardKind::kPartialize;
    steps.push_back({kind, d, now[d], to[d]});
    now[d] = to[d];
  }
  return steps;
}

Result<std::vector<uint64_t>> ReshardStepBytes(const std::string& name, const Shape& shape,
                                               const ProcessMesh& mesh,
                                               const std::vector<Placement>& from,
                                               const std::vector<Placement>& to,
                                               const std::vector<int>& coords) {
  STRATA_ASSIGN_OR_RETURN(std::vector<ReshardStep> steps, PlanReshard(name, shape, mesh, from, to));
  std::vector<Placement> now = from;
  std::vector<uint64_t> bytes;
  for (const ReshardStep& step : steps) {
    const int d = step.mesh_dim, parts = mesh.dim_size(d);
    std::vector<Placement> whole = now;
    whole[d] = Replicate{};
    STRATA_ASSIGN_OR_RETURN(Shape local, LocalShape(shape, mesh, now, coords));
    STRATA_ASSIGN_OR_RETURN(Shape level, LocalShape(shape, mesh, whole, coords));
    now[d] = step.to;
    bytes.push_back(0);
    if (parts == 1) continue;
    auto largest = [&](int axis) { return EvenChunk(level[axis], parts, 0).length; };
    int64_t floats = 0;
    switch (step.kind) {
      case ReshardKind::kAllReduce:
        floats = Product(local, -1);
        break;
      case ReshardKind::kReduceScatter: {
        const int b = std::get<Shard>(step.to).axis;
        floats = parts * largest(b) * Product(level, b);
        break;
      }
      case ReshardKind::kAllGather: {
        const int a = std::get<Shard>(step.from).axis;
        floats = parts * largest(a) * Product(level, a);
        break;
      }
      case ReshardKind::kAllToAll: {
        const int a = std::get<Shard>(step.from).axis, b = std::get<Shard>(step.to).axis;
        floats = parts * largest(a) * largest(b) * Product(level, a, b);
        break;
      }
      case ReshardKind::kSlice:
      case ReshardKind::kPartialize:
        break;
    }
    bytes.back() = static_cast<uint64_t>(floats) * sizeof(float);
  }
  return bytes;
}

Result<uint64_t> ReshardBytes(const std::string& name, const Shape& shape, const ProcessMesh& mesh,
                              const std::vector<Placement>& from, const std::vector<Placement>& to,
                              const std::vector<int>& coords) {
  STRATA_ASSIGN_OR_RETURN(std::vector<uint64_t> steps,
                          ReshardStepBytes(name, shape, mesh, from, to, coords));
  uint64_t bytes = 0;
  for (uint64_t b : steps) bytes += b;
  return bytes;
}

Result<DistTensor> Reshard(const DistTensor& tensor, const std::vector<Placement>& to,
                           MeshComms& comms) {
  const ProcessMesh& mesh = tensor.mesh();
  if (comms.mesh.ToString() != mesh.ToString() || comms.mesh_rank != tensor.mesh_rank()) {
    return Status::InvalidArgument("resharding tensor '" + tensor.name() + "' on " +
                                   mesh.ToString() + " rank " +
                                   std::to_string(tensor.mesh_rank()) + " with the groups of " +
                                   comms.mesh.ToString() + " rank " +
                                   std::to_string(comms.mesh_rank));
  }
  STRATA_ASSIGN_OR_RETURN(std::vector<ReshardStep> steps,
                          PlanReshard(tensor.name(), tensor.global_shape(), mesh,
                                      tensor.placements(), to));
  Piece piece{tensor.local(), tensor.placements()};
  for (const ReshardStep& step : steps) {
    const int d = step.mesh_dim;
    Communicator* comm = comms.dim(d);
    const int coord = tensor.coords()[d];
    Status s;
    if (comm == nullptr &&
        (step.kind != ReshardKind::kSlice && step.kind != ReshardKind::kPartialize)) {
      // One rank along d: every collective leaves the piece as it is.
    } else {
      switch (step.kind) {
        case ReshardKind::kAllReduce:
          s = AllReduceStep(*comm, piece, std::get<Partial>(step.from).op);
          break;
        case ReshardKind::kReduceScatter:
          s = ReduceScatterStep(*comm, piece, std::get<Partial>(step.from).op,
                                std::get<Shard>(step.to).axis);
          break;
        case ReshardKind::kAllGather: {
          const int axis = std::get<Shard>(step.from).axis;
          Result<int64_t> level = LevelExtent(tensor, piece, d, axis);
          s = level.ok() ? AllGatherStep(*comm, piece, axis, *level) : level.status();
          break;
        }
        case ReshardKind::kAllToAll: {
          const int from = std::get<Shard>(step.from).axis;
          Result<int64_t> level = LevelExtent(tensor, piece, d, from);
          s = level.ok() ? AllToAllStep(*comm, piece, from, std::get<Shard>(step.to).axis, *level)
                         : level.status();
          break;
        }
        case ReshardKind::kSlice:
          s = SliceStep(piece, std::get<Shard>(step.to).axis, mesh.dim_size(d), coord);
          break;
        case ReshardKind::kPartialize:
          s = PartializeStep(piece, std::get<Partial>(step.to).op, coord);
          break;
      }
    }
    if (!s.ok()) return Fail(tensor, step, std::move(s));
    piece.placements[d] = step.to;
  }
  return DistTensor::Make(tensor.name(), std::move(piece.local), tensor.global_shape(), mesh, to,
                          tensor.mesh_rank());
}

}  // namespace strata
