// cross_mesh_test.cc: ReshardAcrossMeshes (the stage-to-stage reshard) over in-process Gloo:
// 4 ranks as threads, a tensor moved between two disjoint 2-rank meshes and from a 2 x 2 mesh
// onto 2 of its own ranks, with placement changes; each destination piece against the dense
// tensor and each rank's sent and received bytes against the blocks it must move.
#include "trainer/auto/cross_mesh.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/trainer/inproc_trainers.h"
#include "trainer/comm/gloo_communicator.h"

namespace strata {
namespace {

constexpr int kRanks = 4;

ProcessMesh Mesh(std::vector<MeshDim> dims) { return *ProcessMesh::Make(std::move(dims)); }

Tensor Dense(const Shape& shape) {
  Tensor t = *Tensor::Empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = static_cast<float>(i % 19 - 9);
  return t;
}

int64_t Numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t e : s) n *= e;
  return n;
}

struct Move {
  MeshSpan from;
  std::vector<Placement> from_placements;
  MeshSpan to;
  std::vector<Placement> to_placements;
};

class ReshardAcrossMeshesTest : public InprocTrainersTest {
 protected:
  void SetUp() override { StartTrainers(kRanks); }

  void RunMoves(const std::vector<Move>& moves, const Shape& shape) {
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r) {
      threads.emplace_back([&, r] {
        auto world = MakeGlooCommunicator(*nodes_[r], "auto/world", r, kRanks);
        ASSERT_TRUE(world.ok()) << world.status().ToString();
        const Tensor dense = Dense(shape);
        uint32_t tag = 0;
        for (const Move& m : moves) {
          const std::string what = ToString(m.from_placements) + " on " + m.from.mesh.ToString() +
                                   " -> " + ToString(m.to_placements) + " on " +
                                   m.to.mesh.ToString() + ", rank " + std::to_string(r);
          const int src = static_cast<int>(std::find(m.from.ranks.begin(), m.from.ranks.end(), r) -
                                           m.from.ranks.begin());
          const int dst = static_cast<int>(std::find(m.to.ranks.begin(), m.to.ranks.end(), r) -
                                           m.to.ranks.begin());
          std::optional<DistTensor> piece;
          if (src < m.from.mesh.size()) {
            piece = *ShardTensor("act", dense, m.from.mesh, m.from_placements, src);
          }
          const CommStats before = (*world)->stats();
          auto moved = ReshardAcrossMeshes("act", shape, m.from_placements,
                                           piece ? &*piece : nullptr, m.from, m.to,
                                           m.to_placements, **world, tag++);
          ASSERT_TRUE(moved.ok()) << what << ": " << moved.status().ToString();
          const CommStats d = (*world)->stats() - before;
          // What this rank must send and receive, from the plan's blocks.
          auto plan = *PlanCrossMesh("act", shape, m.from.mesh, m.from_placements, m.to.mesh,
                                     m.to_placements);
          uint64_t send = 0, recv = 0;
          for (const BlockTransfer& t : plan) {
            const int s = m.from.ranks[t.from], q = m.to.ranks[t.to];
            if (s == q) continue;
            if (s == r) send += Numel(t.shape) * 4;
            if (q == r) recv += Numel(t.shape) * 4;
          }
          EXPECT_EQ(d[CommOp::kSend].bytes, send) << what;
          EXPECT_EQ(d[CommOp::kRecv].bytes, recv) << what;
          if (dst == m.to.mesh.size()) {
            EXPECT_FALSE(moved->has_value()) << what;
            continue;
          }
          ASSERT_TRUE(moved->has_value()) << what;
          const Tensor want =
              ShardTensor("act", dense, m.to.mesh, m.to_placements, dst)->local();
          ASSERT_EQ((*moved)->local().shape(), want.shape()) << what;
          for (int64_t i = 0; i < want.numel(); ++i) {
            ASSERT_EQ((*moved)->local().data_as<float>()[i], want.data_as<float>()[i]) << what;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
  }
};

// Two pipeline stages on disjoint meshes; every destination piece arrives from the one source
// rank that holds it, and the replicas of a Replicate source do not all send.
TEST_F(ReshardAcrossMeshesTest, BetweenDisjointMeshesWithAPlacementChange) {
  const MeshSpan a{Mesh({{"x", 2}}), {0, 1}}, b{Mesh({{"x", 2}}), {2, 3}};
  const Shape shape = {6, 5};
  RunMoves({{a, {Shard{0}}, b, {Shard{0}}},
            {a, {Shard{0}}, b, {Replicate{}}},
            {a, {Replicate{}}, b, {Shard{1}}},
            {a, {Shard{0}}, b, {Shard{1}}},
            {b, {Shard{1}}, a, {Partial{ReduceOp::kSum}}}},
           shape);
}

// The same stage-to-stage case counted from the shapes alone: S(0) to S(0) between equal
// meshes is one send of the local rows per rank.
TEST_F(ReshardAcrossMeshesTest, PipelineHandOffSendsEachPieceOnce) {
  const MeshSpan a{Mesh({{"x", 2}}), {0, 1}}, b{Mesh({{"x", 2}}), {2, 3}};
  auto plan = PlanCrossMesh("act", {8, 4}, a.mesh, {Shard{0}}, b.mesh, {Shard{0}});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ((*plan)[i].from, i);
    EXPECT_EQ((*plan)[i].to, i);
    EXPECT_EQ((*plan)[i].shape, (Shape{4, 4}));
  }
  // Replicate -> Replicate: only coordinate 0 sends, to every destination rank.
  plan = PlanCrossMesh("act", {8, 4}, a.mesh, {Replicate{}}, b.mesh, {Replicate{}});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 2u);
  EXPECT_EQ((*plan)[0].from, 0);
  EXPECT_EQ((*plan)[1].from, 0);
  auto partial = PlanCrossMesh("act", {8, 4}, a.mesh, {Partial{}}, b.mesh, {Replicate{}});
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.status().ToString().find("'act'"), std::string::npos);
}

// From a 2 x 2 mesh onto two of its own ranks: blocks a rank keeps are copied, not sent.
TEST_F(ReshardAcrossMeshesTest, OntoOverlappingRanks) {
  const MeshSpan grid{Mesh({{"x", 2}, {"y", 2}}), {0, 1, 2, 3}}, pair{Mesh({{"x", 2}}), {0, 1}};
  RunMoves({{grid, {Shard{0}, Shard{1}}, pair, {Shard{1}}},
            {grid, {Replicate{}, Shard{0}}, pair, {Shard{0}}},
            {pair, {Shard{0}}, grid, {Shard{1}, Shard{0}}}},
           {6, 5});
}

}  // namespace
}  // namespace strata
