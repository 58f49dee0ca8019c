// mesh_test.cc: ProcessMesh layout and groups (Megatron order), placements and the local
// shapes and offsets of the seeds' MLP under tensor and data parallelism.
#include "common/mesh.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace strata {
namespace {

using Groups = std::vector<std::vector<int>>;
using Extents = std::vector<int64_t>;

ProcessMesh MustMake(std::vector<MeshDim> dims) {
  Result<ProcessMesh> mesh = ProcessMesh::Make(std::move(dims));
  EXPECT_TRUE(mesh.ok()) << mesh.status().ToString();
  return *mesh;
}

ProcessMesh MustMegatron(int pp, int dp, int tp) {
  Result<ProcessMesh> mesh = ProcessMesh::Megatron(pp, dp, tp);
  EXPECT_TRUE(mesh.ok()) << mesh.status().ToString();
  return *mesh;
}

// The seeds' example: 16 ranks, pp = 4, so each stage has dp * tp = 4 ranks.
TEST(MeshTest, SeedsPipelineGroups) {
  const Groups expected = {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}};
  for (auto [dp, tp] : {std::pair{2, 2}, std::pair{4, 1}, std::pair{1, 4}}) {
    ProcessMesh mesh = MustMegatron(4, dp, tp);
    EXPECT_EQ(mesh.size(), 16);
    EXPECT_EQ(mesh.Groups("pp"), expected) << mesh.ToString();
  }
}

TEST(MeshTest, MegatronTensorAndDataGroups) {
  ProcessMesh mesh = MustMegatron(4, 2, 2);
  EXPECT_EQ(mesh.ToString(), "ProcessMesh(pp=4, dp=2, tp=2)");
  EXPECT_EQ(mesh.ndim(), 3);
  EXPECT_EQ(mesh.DimIndex("pp"), 0);
  EXPECT_EQ(mesh.DimIndex("dp"), 1);
  EXPECT_EQ(mesh.DimIndex("tp"), 2);
  EXPECT_EQ(mesh.Groups("tp"),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(mesh.Groups("dp"),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(mesh.Groups(0), mesh.Groups("pp"));
  EXPECT_EQ(mesh.GroupOf(5, "pp"), (std::vector<int>{1, 5, 9, 13}));
  EXPECT_EQ(mesh.GroupOf(5, "dp"), (std::vector<int>{5, 7}));
  EXPECT_EQ(mesh.GroupOf(5, "tp"), (std::vector<int>{4, 5}));
  EXPECT_EQ(mesh.Coords(6), (std::vector<int>{1, 1, 0}));
  EXPECT_EQ(mesh.Rank({3, 1, 1}), 15);
  // The ranks of one pipeline stage, and the model-parallel (pp x tp) groups.
  EXPECT_EQ(mesh.GroupsOver({"dp", "tp"}),
            (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(mesh.GroupsOver({"tp", "dp"}), mesh.GroupsOver({"dp", "tp"}));
  EXPECT_EQ(mesh.GroupsOver({"pp", "tp"}),
            (Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
  EXPECT_EQ(mesh.GroupsOver({"pp", "dp", "tp"}).size(), 1u);
}

TEST(MeshTest, RankAndCoordsRoundTrip) {
  for (const ProcessMesh& mesh :
       {MustMegatron(4, 2, 2), MustMegatron(1, 8, 1), MustMegatron(3, 5, 2), MustMake({{"x", 7}}),
        MustMake({{"a", 2}, {"b", 3}, {"c", 1}, {"d", 4}})}) {
    for (int rank = 0; rank < mesh.size(); ++rank) {
      std::vector<int> coords = mesh.Coords(rank);
      ASSERT_EQ(static_cast<int>(coords.size()), mesh.ndim());
      EXPECT_EQ(mesh.Rank(coords), rank) << mesh.ToString();
    }
  }
}

// Along every dimension, the groups partition the ranks; members differ only along it.
TEST(MeshTest, GroupsPartitionTheRanks) {
  ProcessMesh mesh = MustMake({{"a", 2}, {"b", 3}, {"c", 4}});
  for (int d = 0; d < mesh.ndim(); ++d) {
    Groups groups = mesh.Groups(d);
    EXPECT_EQ(static_cast<int>(groups.size()), mesh.size() / mesh.dim_size(d));
    std::vector<int> seen;
    int previous_first = -1;
    for (const std::vector<int>& group : groups) {
      ASSERT_EQ(static_cast<int>(group.size()), mesh.dim_size(d));
      EXPECT_GT(group.front(), previous_first);
      previous_first = group.front();
      for (size_t i = 0; i < group.size(); ++i) {
        std::vector<int> a = mesh.Coords(group.front());
        std::vector<int> b = mesh.Coords(group[i]);
        EXPECT_EQ(b[d], static_cast<int>(i));
        a[d] = b[d] = 0;
        EXPECT_EQ(a, b);
        EXPECT_EQ(mesh.GroupOf(group[i], mesh.dims()[d].name), group);
      }
      seen.insert(seen.end(), group.begin(), group.end());
    }
    std::sort(seen.begin(), seen.end());
    for (int r = 0; r < mesh.size(); ++r) EXPECT_EQ(seen[r], r);
  }
}

TEST(MeshTest, BadMeshesAreRejected) {
  const std::vector<std::vector<MeshDim>> bad = {
      {},           {{"dp", 0}},
      {{"dp", -2}}, {{"dp", 2}, {"dp", 2}},
      {{"", 2}},    {{"a", 65536}, {"b", 65536}},
  };
  for (const auto& dims : bad) {
    Result<ProcessMesh> mesh = ProcessMesh::Make(dims);
    ASSERT_FALSE(mesh.ok());
    EXPECT_EQ(mesh.status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_FALSE(ProcessMesh::Megatron(0, 1, 1).ok());
  EXPECT_TRUE(ProcessMesh::Megatron(1, 1, 1).ok());
  ProcessMesh mesh = MustMegatron(1, 2, 1);
  EXPECT_TRUE(mesh.HasDim("dp"));
  EXPECT_FALSE(mesh.HasDim("ep"));
}

TEST(MeshDeathTest, OutOfRangeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ProcessMesh mesh = MustMegatron(2, 2, 2);
  EXPECT_DEATH(mesh.Coords(8), "rank 8");
  EXPECT_DEATH(mesh.Rank({0, 2, 0}), "coordinate 2");
  EXPECT_DEATH(mesh.Groups("ep"), "no mesh dimension 'ep'");
}

TEST(MeshTest, PlacementsPrint) {
  EXPECT_EQ(ToString(Placement{Replicate{}}), "R");
  EXPECT_EQ(ToString(Placement{Shard{1}}), "S(1)");
  EXPECT_EQ(ToString(Placement{Partial{}}), "P(sum)");
  EXPECT_EQ(ToString(Placement{Partial{ReduceOp::kMax}}), "P(max)");
  EXPECT_EQ(ToString(std::vector<Placement>{Shard{0}, Replicate{}}), "[S(0), R]");
  EXPECT_EQ(Placement{Shard{1}}, Placement{Shard{1}});
  EXPECT_NE(Placement{Shard{1}}, Placement{Shard{0}});
  EXPECT_NE(Placement{Partial{}}, Placement{Replicate{}});
}

Extents ShapeAt(const Extents& global, const ProcessMesh& mesh,
                const std::vector<Placement>& placements, const std::vector<int>& coords) {
  Result<Extents> r = LocalShape(global, mesh, placements, coords);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : Extents{};
}

Extents OffsetAt(const Extents& global, const ProcessMesh& mesh,
                 const std::vector<Placement>& placements, const std::vector<int>& coords) {
  Result<Extents> r = LocalOffset(global, mesh, placements, coords);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : Extents{};
}

// The seeds' Paddle example: a 1024 -> 4096 -> 1024 MLP on two ranks. w0 is column-split
// (Shard(1)), w1 row-split (Shard(0)), so the hidden activation never needs gathering.
TEST(MeshTest, SeedsMlpTensorParallelOnTwoRanks) {
  ProcessMesh mesh = MustMake({{"tp", 2}});
  const std::vector<Placement> column = {Shard{1}};
  const std::vector<Placement> row = {Shard{0}};
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ShapeAt({1024, 4096}, mesh, column, {r}), (Extents{1024, 2048}));
    EXPECT_EQ(OffsetAt({1024, 4096}, mesh, column, {r}), (Extents{0, 2048 * r}));
    EXPECT_EQ(ShapeAt({4096, 1024}, mesh, row, {r}), (Extents{2048, 1024}));
    EXPECT_EQ(OffsetAt({4096, 1024}, mesh, row, {r}), (Extents{2048 * r, 0}));
    // The bias of the column-parallel layer is split with it; the output of the row-parallel
    // layer is a partial sum of full shape until the all-reduce.
    EXPECT_EQ(ShapeAt({4096}, mesh, {Shard{0}}, {r}), (Extents{2048}));
    EXPECT_EQ(ShapeAt({32, 1024}, mesh, {Partial{}}, {r}), (Extents{32, 1024}));
    EXPECT_EQ(OffsetAt({32, 1024}, mesh, {Partial{}}, {r}), (Extents{0, 0}));
  }
}

// The same MLP on dp = 2 x tp = 2: data split over dp, weights over tp, replicated over dp.
TEST(MeshTest, SeedsMlpDataAndTensorParallel) {
  ProcessMesh mesh = MustMake({{"dp", 2}, {"tp", 2}});
  const int64_t batch = 32;
  for (int rank = 0; rank < mesh.size(); ++rank) {
    const std::vector<int> c = mesh.Coords(rank);
    const int dp = c[0];
    const int tp = c[1];
    EXPECT_EQ(ShapeAt({1024, 4096}, mesh, {Replicate{}, Shard{1}}, c), (Extents{1024, 2048}));
    EXPECT_EQ(OffsetAt({1024, 4096}, mesh, {Replicate{}, Shard{1}}, c), (Extents{0, 2048 * tp}));
    EXPECT_EQ(ShapeAt({4096, 1024}, mesh, {Replicate{}, Shard{0}}, c), (Extents{2048, 1024}));
    EXPECT_EQ(ShapeAt({batch, 1024}, mesh, {Shard{0}, Replicate{}}, c), (Extents{16, 1024}));
    EXPECT_EQ(OffsetAt({batch, 1024}, mesh, {Shard{0}, Replicate{}}, c), (Extents{16 * dp, 0}));
    // Hidden activation: rows by dp, columns by tp.
    EXPECT_EQ(ShapeAt({batch, 4096}, mesh, {Shard{0}, Shard{1}}, c), (Extents{16, 2048}));
    EXPECT_EQ(OffsetAt({batch, 4096}, mesh, {Shard{0}, Shard{1}}, c),
              (Extents{16 * dp, 2048 * tp}));
    EXPECT_EQ(ShapeAt({batch, 1024}, mesh, {Shard{0}, Partial{}}, c), (Extents{16, 1024}));
  }
}

TEST(MeshTest, UnevenSplitsGiveTheFirstRanksOneMore) {
  ProcessMesh mesh = MustMake({{"x", 4}});
  const std::vector<Placement> s0 = {Shard{0}};
  const int64_t lengths[] = {3, 3, 2, 2};
  const int64_t offsets[] = {0, 3, 6, 8};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(ShapeAt({10, 5}, mesh, s0, {r}), (Extents{lengths[r], 5}));
    EXPECT_EQ(OffsetAt({10, 5}, mesh, s0, {r}), (Extents{offsets[r], 0}));
  }
  // Fewer items than ranks: the last ranks get empty pieces.
  const int64_t few[] = {1, 1, 0, 0};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(ShapeAt({2}, mesh, s0, {r}), (Extents{few[r]}));
  EXPECT_EQ(EvenChunk(7, 3, 0).length, 3);
  EXPECT_EQ(EvenChunk(7, 3, 2).offset, 5);
  EXPECT_EQ(EvenChunk(0, 3, 1).length, 0);
}

// Two mesh dimensions sharding one axis nest: the slower dimension splits first.
TEST(MeshTest, NestedShardsTileTheAxis) {
  ProcessMesh mesh = MustMake({{"a", 2}, {"b", 2}});
  const std::vector<Placement> both = {Shard{0}, Shard{0}};
  // 10 -> (5, 5) by a, then each 5 -> (3, 2) by b.
  EXPECT_EQ(ShapeAt({10}, mesh, both, {0, 0}), (Extents{3}));
  EXPECT_EQ(OffsetAt({10}, mesh, both, {0, 1}), (Extents{3}));
  EXPECT_EQ(OffsetAt({10}, mesh, both, {1, 0}), (Extents{5}));
  EXPECT_EQ(ShapeAt({10}, mesh, both, {1, 1}), (Extents{2}));
  EXPECT_EQ(OffsetAt({10}, mesh, both, {1, 1}), (Extents{8}));
  for (int64_t n : {0, 1, 7, 16, 33}) {
    int64_t next = 0;  // rank order over (a, b) walks the axis in order
    for (int rank = 0; rank < mesh.size(); ++rank) {
      EXPECT_EQ(OffsetAt({n}, mesh, both, mesh.Coords(rank))[0], next) << n;
      next += ShapeAt({n}, mesh, both, mesh.Coords(rank))[0];
    }
    EXPECT_EQ(next, n);
  }
}

TEST(MeshTest, BadPlacementsAreStatuses) {
  ProcessMesh mesh = MustMake({{"dp", 2}, {"tp", 2}});
  auto code = [&](const Extents& global, const std::vector<Placement>& p,
                  const std::vector<int>& c) {
    EXPECT_EQ(LocalOffset(global, mesh, p, c).status().code(),
              LocalShape(global, mesh, p, c).status().code());
    return LocalShape(global, mesh, p, c).status().code();
  };
  EXPECT_EQ(code({8, 8}, {Shard{0}}, {0, 0}), StatusCode::kInvalidArgument);  // too few
  EXPECT_EQ(code({8, 8}, {Shard{0}, Replicate{}}, {0}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({8, 8}, {Shard{2}, Replicate{}}, {0, 0}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({8, 8}, {Shard{-1}, Replicate{}}, {0, 0}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({8, 8}, {Shard{0}, Replicate{}}, {2, 0}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({8, -8}, {Shard{0}, Replicate{}}, {0, 0}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({8, 8}, {Shard{0}, Replicate{}}, {1, 1}), StatusCode::kOk);
}

}  // namespace
}  // namespace strata
