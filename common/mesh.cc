// mesh.cc: ProcessMesh layout and groups; placements and the local pieces they describe.
#include "common/mesh.h"

#include <algorithm>
#include <limits>
#include <set>

#include "common/check.h"

namespace strata {

Result<ProcessMesh> ProcessMesh::Make(std::vector<MeshDim> dims) {
  if (dims.empty()) return Status::InvalidArgument("a process mesh needs at least one dimension");
  std::set<std::string_view> names;
  int64_t size = 1;
  for (const MeshDim& dim : dims) {
    if (dim.name.empty()) return Status::InvalidArgument("a mesh dimension has no name");
    if (!names.insert(dim.name).second) {
      return Status::InvalidArgument("mesh dimension '" + dim.name + "' appears twice");
    }
    if (dim.size < 1) {
      return Status::InvalidArgument("mesh dimension '" + dim.name + "' has size " +
                                     std::to_string(dim.size) + " (must be >= 1)");
    }
    size *= dim.size;
    if (size > std::numeric_limits<int>::max()) {
      return Status::InvalidArgument("process mesh has more ranks than an int can count");
    }
  }
  return ProcessMesh(std::move(dims), static_cast<int>(size));
}

Result<ProcessMesh> ProcessMesh::Megatron(int pp, int dp, int tp) {
  return Make({{"pp", pp}, {"dp", dp}, {"tp", tp}});
}

int ProcessMesh::dim_size(int d) const {
  STRATA_CHECK(d >= 0 && d < ndim()) << "mesh dimension " << d << " of " << ToString();
  return dims_[d].size;
}

bool ProcessMesh::HasDim(std::string_view name) const {
  return std::any_of(dims_.begin(), dims_.end(),
                     [&](const MeshDim& dim) { return dim.name == name; });
}

int ProcessMesh::DimIndex(std::string_view name) const {
  for (int d = 0; d < ndim(); ++d) {
    if (dims_[d].name == name) return d;
  }
  STRATA_CHECK(false) << "no mesh dimension '" << name << "' in " << ToString();
  return -1;
}

std::vector<int> ProcessMesh::Coords(int rank) const {
  STRATA_CHECK(rank >= 0 && rank < size_) << "rank " << rank << " of " << ToString();
  std::vector<int> coords(dims_.size());
  for (int d = ndim() - 1; d >= 0; --d) {
    coords[d] = rank % dims_[d].size;
    rank /= dims_[d].size;
  }
  return coords;
}

int ProcessMesh::Rank(const std::vector<int>& coords) const {
  STRATA_CHECK_EQ(coords.size(), dims_.size());
  int rank = 0;
  for (int d = 0; d < ndim(); ++d) {
    STRATA_CHECK(coords[d] >= 0 && coords[d] < dims_[d].size)
        << "coordinate " << coords[d] << " on '" << dims_[d].name << "' of " << ToString();
    rank = rank * dims_[d].size + coords[d];
  }
  return rank;
}

std::vector<std::vector<int>> ProcessMesh::GroupsOverDims(const std::vector<int>& dims) const {
  int group_size = 1;
  for (int d : dims) group_size *= dims_[d].size;
  std::vector<std::vector<int>> groups;
  groups.reserve(size_ / group_size);
  // Each group is led by its member with coordinate 0 on every varying dimension, which is
  // also its lowest rank; leaders in increasing order give groups sorted by first rank.
  for (int leader = 0; leader < size_; ++leader) {
    std::vector<int> coords = Coords(leader);
    if (std::any_of(dims.begin(), dims.end(), [&](int d) { return coords[d] != 0; })) continue;
    std::vector<int>& group = groups.emplace_back();
    group.reserve(group_size);
    for (int i = 0; i < group_size; ++i) {
      int rest = i;  // i spelled in the varying dimensions, the last fastest
      for (auto d = dims.rbegin(); d != dims.rend(); ++d) {
        coords[*d] = rest % dims_[*d].size;
        rest /= dims_[*d].size;
      }
      group.push_back(Rank(coords));
    }
  }
  return groups;
}

std::vector<std::vector<int>> ProcessMesh::Groups(int d) const {
  STRATA_CHECK(d >= 0 && d < ndim()) << "mesh dimension " << d << " of " << ToString();
  return GroupsOverDims({d});
}

std::vector<std::vector<int>> ProcessMesh::Groups(std::string_view name) const {
  return Groups(DimIndex(name));
}

std::vector<std::vector<int>> ProcessMesh::GroupsOver(const std::vector<std::string>& names) const {
  std::vector<int> dims;
  for (const std::string& name : names) dims.push_back(DimIndex(name));
  std::sort(dims.begin(), dims.end());  // mesh order, whatever order the names came in
  STRATA_CHECK(std::adjacent_find(dims.begin(), dims.end()) == dims.end())
      << "a mesh dimension is named twice";
  return GroupsOverDims(dims);
}

std::vector<int> ProcessMesh::GroupOf(int rank, std::string_view name) const {
  const int d = DimIndex(name);
  std::vector<int> coords = Coords(rank);
  std::vector<int> group(dims_[d].size);
  for (int i = 0; i < dims_[d].size; ++i) {
    coords[d] = i;
    group[i] = Rank(coords);
  }
  return group;
}

std::string ProcessMesh::ToString() const {
  std::string s = "ProcessMesh(";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i > 0) s += ", ";
    s += dims_[i].name + "=" + std::to_string(dims_[i].size);
  }
  return s + ")";
}

std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "unknown";
}

std::string ToString(const Placement& placement) {
  if (const auto* shard = std::get_if<Shard>(&placement)) {
    return "S(" + std::to_string(shard->axis) + ")";
  }
  if (const auto* partial = std::get_if<Partial>(&placement)) {
    return "P(" + std::string(ReduceOpName(partial->op)) + ")";
  }
  return "R";
}

std::string ToString(const std::vector<Placement>& placements) {
  std::string s = "[";
  for (size_t i = 0; i < placements.size(); ++i) {
    if (i > 0) s += ", ";
    s += ToString(placements[i]);
  }
  return s + "]";
}

Chunk EvenChunk(int64_t n, int parts, int i) {
  STRATA_CHECK(n >= 0 && parts >= 1 && i >= 0 && i < parts)
      << "EvenChunk(" << n << ", " << parts << ", " << i << ")";
  const int64_t base = n / parts;
  const int64_t rem = n % parts;
  return Chunk{i * base + std::min<int64_t>(i, rem), base + (i < rem ? 1 : 0)};
}

std::vector<Chunk> CausalBalancedChunks(int64_t n, int parts, int i) {
  STRATA_CHECK(parts >= 1 && i >= 0 && i < parts && n >= 0 && n % (2 * parts) == 0)
      << "CausalBalancedChunks(" << n << ", " << parts << ", " << i << "): n must be divisible by " << 2 * parts;
  if (parts == 1) return {Chunk{0, n}};
  const int64_t len = n / (2 * parts);
  return {Chunk{i * len, len}, Chunk{(2 * parts - 1 - i) * len, len}};
}

std::vector<int64_t> CausalBalancedPositions(int64_t n, int parts, int i) {
  std::vector<int64_t> positions;
  for (const Chunk& c : CausalBalancedChunks(n, parts, i)) {
    for (int64_t p = c.offset; p < c.offset + c.length; ++p) positions.push_back(p);
  }
  return positions;
}

namespace {

struct LocalPiece {
  std::vector<int64_t> shape;
  std::vector<int64_t> offset;
};

Result<LocalPiece> Locate(const std::vector<int64_t>& global_shape, const ProcessMesh& mesh,
                          const std::vector<Placement>& placements,
                          const std::vector<int>& coords) {
  if (static_cast<int>(placements.size()) != mesh.ndim()) {
    return Status::InvalidArgument(std::to_string(placements.size()) + " placements " +
                                   ToString(placements) + " for " + mesh.ToString());
  }
  if (static_cast<int>(coords.size()) != mesh.ndim()) {
    return Status::InvalidArgument(std::to_string(coords.size()) + " coordinates for " +
                                   mesh.ToString());
  }
  for (int64_t extent : global_shape) {
    if (extent < 0) return Status::InvalidArgument("negative extent in a global shape");
  }
  LocalPiece piece{global_shape, std::vector<int64_t>(global_shape.size(), 0)};
  for (int d = 0; d < mesh.ndim(); ++d) {
    if (coords[d] < 0 || coords[d] >= mesh.dim_size(d)) {
      return Status::InvalidArgument("coordinate " + std::to_string(coords[d]) + " on '" +
                                     mesh.dims()[d].name + "' of " + mesh.ToString());
    }
    const auto* shard = std::get_if<Shard>(&placements[d]);
    if (shard == nullptr) continue;
    if (shard->axis < 0 || shard->axis >= static_cast<int>(global_shape.size())) {
      return Status::InvalidArgument(ToString(placements[d]) + " on a " +
                                     std::to_string(global_shape.size()) + "-d tensor");
    }
    const Chunk chunk = EvenChunk(piece.shape[shard->axis], mesh.dim_size(d), coords[d]);
    piece.offset[shard->axis] += chunk.offset;
    piece.shape[shard->axis] = chunk.length;
  }
  return piece;
}

}  // namespace

Result<std::vector<int64_t>> LocalShape(const std::vector<int64_t>& global_shape,
                                        const ProcessMesh& mesh,
                                        const std::vector<Placement>& placements,
                                        const std::vector<int>& coords) {
  STRATA_ASSIGN_OR_RETURN(LocalPiece piece, Locate(global_shape, mesh, placements, coords));
  return std::move(piece.shape);
}

Result<std::vector<int64_t>> LocalOffset(const std::vector<int64_t>& global_shape,
                                         const ProcessMesh& mesh,
                                         const std::vector<Placement>& placements,
                                         const std::vector<int>& coords) {
  STRATA_ASSIGN_OR_RETURN(LocalPiece piece, Locate(global_shape, mesh, placements, coords));
  return std::move(piece.offset);
}

}  // namespace strata
