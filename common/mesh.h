// mesh.h: ProcessMesh (ranks laid out on named dimensions, e.g. pp x dp x tp), the process
// groups along its dimensions, and placements (Replicate, Shard, Partial) with the local
// shape and offset of a tensor placed on the mesh.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"

namespace strata {

struct MeshDim {
  std::string name;  // "pp", "dp", "tp", ...
  int size = 1;
};

// Ranks 0..size()-1 laid out row-major over named dimensions listed slowest to fastest:
// the last dimension varies fastest between consecutive ranks. A value type.
class ProcessMesh {
 public:
  // InvalidArgument unless there is at least one dimension, every size is >= 1, names are
  // non-empty and unique, and the product fits in an int.
  static Result<ProcessMesh> Make(std::vector<MeshDim> dims);
  // Megatron-LM's layout: dims pp, dp, tp, so tp varies fastest (tensor-parallel peers are
  // neighbours, on the fastest links), then dp, then pp.
  static Result<ProcessMesh> Megatron(int pp, int dp, int tp);

  int size() const { return size_; }  // number of ranks
  int ndim() const { return static_cast<int>(dims_.size()); }
  const std::vector<MeshDim>& dims() const { return dims_; }
  int dim_size(int d) const;
  bool HasDim(std::string_view name) const;
  // The position of the dimension called `name`; aborts if there is none (use HasDim first
  // when the name comes from outside the code).
  int DimIndex(std::string_view name) const;

  // rank <-> coordinates (one per dimension). Out-of-range arguments abort.
  std::vector<int> Coords(int rank) const;
  int Rank(const std::vector<int>& coords) const;

  // Every group of ranks that differ only along dimension `d`, each group in increasing
  // coordinate order, groups sorted by their first rank. For Megatron(4, 2, 2), Groups("pp")
  // is [0,4,8,12], [1,5,9,13], [2,6,10,14], [3,7,11,15].
  std::vector<std::vector<int>> Groups(int d) const;
  std::vector<std::vector<int>> Groups(std::string_view name) const;
  // Groups whose ranks differ only along all of `names` (e.g. {"dp", "tp"} for the ranks of one
  // pipeline stage), ordered row-major over those dimensions.
  std::vector<std::vector<int>> GroupsOver(const std::vector<std::string>& names) const;
  // The group along `name` that contains `rank`.
  std::vector<int> GroupOf(int rank, std::string_view name) const;

  std::string ToString() const;  // "ProcessMesh(pp=4, dp=2, tp=2)"

 private:
  ProcessMesh(std::vector<MeshDim> dims, int size) : dims_(std::move(dims)), size_(size) {}
  std::vector<std::vector<int>> GroupsOverDims(const std::vector<int>& dims) const;

  std::vector<MeshDim> dims_;
  int size_ = 1;
};

// How a reduction combines values. Partial placements carry one; communicators use the same.
enum class ReduceOp : uint8_t { kSum = 0, kAvg = 1, kMax = 2, kMin = 3 };
std::string_view ReduceOpName(ReduceOp op);  // "sum", "avg", "max", "min"

// How a tensor lies along one mesh dimension (the DTensor / Paddle auto-parallel vocabulary).
struct Replicate {  // every rank holds the whole tensor
  friend bool operator==(const Replicate&, const Replicate&) = default;
};
struct Shard {  // split along tensor axis `axis`, one chunk per coordinate
  int axis = 0;
  friend bool operator==(const Shard&, const Shard&) = default;
};
struct Partial {  // every rank holds a full-shape partial value; `op` over the dim gives it
  ReduceOp op = ReduceOp::kSum;
  friend bool operator==(const Partial&, const Partial&) = default;
};
using Placement = std::variant<Replicate, Shard, Partial>;

std::string ToString(const Placement& placement);                // "R", "S(1)", "P(sum)"
std::string ToString(const std::vector<Placement>& placements);  // "[S(0), R]"

// The chunk of `n` items that coordinate `i` of `parts` gets: sizes differ by at most one and
// the first n % parts chunks are the larger ones (numpy.array_split; not torch.chunk, whose
// ceil-sized chunks can leave trailing ranks empty while others hold more).
struct Chunk {
  int64_t offset = 0;
  int64_t length = 0;
};
Chunk EvenChunk(int64_t n, int parts, int i);

// Context parallelism's split of a causal sequence of `n` positions over `parts` ranks: cut into
// 2 * parts equal chunks, rank i holds chunks i and 2 * parts - 1 - i, so every rank has the
// same share of the causal mask's work (one chunk, the whole sequence, when parts is 1). n must
// be divisible by 2 * parts (aborts otherwise: callers check the job first).
std::vector<Chunk> CausalBalancedChunks(int64_t n, int parts, int i);
// The global positions of rank i's n / parts tokens under that split, in the order it holds them.
std::vector<int64_t> CausalBalancedPositions(int64_t n, int parts, int i);

// The shape, and the offset within the global tensor, of the piece that the rank at `coords`
// holds when a tensor of `global_shape` is placed on `mesh` with one placement per mesh
// dimension. Shards along several mesh dimensions on one tensor axis nest in mesh-dimension
// order (the slower dimension splits first). Partial and Replicate keep the global extent.
// InvalidArgument for a wrong number of placements or coordinates, a coordinate out of range,
// a shard axis outside the tensor, or a negative extent.
Result<std::vector<int64_t>> LocalShape(const std::vector<int64_t>& global_shape,
                                        const ProcessMesh& mesh,
                                        const std::vector<Placement>& placements,
                                        const std::vector<int>& coords);
Result<std::vector<int64_t>> LocalOffset(const std::vector<int64_t>& global_shape,
                                         const ProcessMesh& mesh,
                                         const std::vector<Placement>& placements,
                                         const std::vector<int>& coords);

}  // namespace strata
