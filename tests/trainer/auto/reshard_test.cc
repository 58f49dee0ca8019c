// reshard_test.cc: PlanReshard's steps (pure) and Reshard over in-process Gloo with ranks as
// threads: every transition between Replicate, Shard(0), Shard(1) and Partial(op) for op in
// sum, avg and max, on 1-D meshes of 2 and 4 ranks and 2-D meshes of 1 x 2, 2 x 1 and 2 x 2, on
// an even and a ragged tensor. Each result is held against the dense tensor (Partial results
// reduced over their ranks), and the bytes each rank moved (CommStats) against a count computed
// here from the shapes.
#include "trainer/auto/reshard.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/trainer/inproc_trainers.h"
#include "trainer/comm/gloo_communicator.h"

namespace strata {
namespace {

ProcessMesh Mesh(std::vector<MeshDim> dims) {
  Result<ProcessMesh> mesh = ProcessMesh::Make(std::move(dims));
  STRATA_CHECK(mesh.ok()) << mesh.status().ToString();
  return *mesh;
}

// Small integers, so sums, maxima and averages over 2 or 4 ranks are exact in floats.
Tensor Dense(const Shape& shape) {
  Tensor t = *Tensor::Empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = static_cast<float>((i * 7) % 23 - 11);
  return t;
}

int64_t Ceil(int64_t n, int parts) { return (n + parts - 1) / parts; }

// ---- The plan, without communicating.

TEST(ReshardPlan, OneDimensionUsesTheCheapestCollective) {
  const ProcessMesh mesh = Mesh({{"x", 4}});
  const Shape shape = {8, 4};
  auto plan = [&](Placement from, Placement to) {
    auto steps = PlanReshard("w", shape, mesh, {from}, {to});
    EXPECT_TRUE(steps.ok()) << steps.status().ToString();
    return ToString(*steps, mesh);
  };
  const Partial sum{ReduceOp::kSum}, max{ReduceOp::kMax};
  EXPECT_EQ(plan(sum, Replicate{}), "all_reduce on x: P(sum) -> R");
  EXPECT_EQ(plan(sum, Shard{1}), "reduce_scatter on x: P(sum) -> S(1)");
  EXPECT_EQ(plan(Shard{0}, Replicate{}), "all_gather on x: S(0) -> R");
  EXPECT_EQ(plan(Replicate{}, Shard{1}), "slice on x: R -> S(1)");
  EXPECT_EQ(plan(Shard{0}, Shard{1}), "all_to_all on x: S(0) -> S(1)");
  EXPECT_EQ(plan(Replicate{}, sum), "partialize on x: R -> P(sum)");
  EXPECT_EQ(plan(Shard{1}, max), "all_gather on x: S(1) -> R; partialize on x: R -> P(max)");
  EXPECT_EQ(plan(sum, max), "all_reduce on x: P(sum) -> R; partialize on x: R -> P(max)");
  EXPECT_EQ(plan(Shard{1}, Shard{1}), "nothing");
}

// Shards of one axis on two mesh dimensions nest (the slower splits first), so a faster
// dimension's shard is undone before a slower one changes and redone after.
TEST(ReshardPlan, TwoDimensionsNestShardsInMeshOrder) {
  const ProcessMesh mesh = Mesh({{"x", 2}, {"y", 2}});
  auto plan = [&](std::vector<Placement> from, std::vector<Placement> to) {
    auto steps = PlanReshard("w", {8, 4}, mesh, from, to);
    EXPECT_TRUE(steps.ok()) << steps.status().ToString();
    return ToString(*steps, mesh);
  };
  EXPECT_EQ(plan({Shard{0}, Shard{0}}, {Replicate{}, Shard{0}}),
            "all_gather on y: S(0) -> R; all_gather on x: S(0) -> R; slice on y: R -> S(0)");
  // The slower dimension keeps its shard of axis 0; the faster one trades axis 0 for 1.
  EXPECT_EQ(plan({Shard{0}, Shard{0}}, {Shard{0}, Shard{1}}), "all_to_all on y: S(0) -> S(1)");
  EXPECT_EQ(plan({Shard{0}, Shard{1}}, {Shard{1}, Shard{0}}),
            "all_gather on y: S(1) -> R; all_to_all on x: S(0) -> S(1); slice on y: R -> S(0)");
  EXPECT_EQ(plan({Partial{}, Shard{0}}, {Shard{0}, Shard{0}}),
            "all_gather on y: S(0) -> R; reduce_scatter on x: P(sum) -> S(0); slice on y: R -> S(0)");
  EXPECT_EQ(plan({Partial{}, Partial{}}, {Replicate{}, Shard{1}}),
            "reduce_scatter on y: P(sum) -> S(1); all_reduce on x: P(sum) -> R");
}

TEST(ReshardPlan, ShardAxisPastTheRankNamesTensorAxisAndRank) {
  const ProcessMesh mesh = Mesh({{"x", 2}});
  auto steps = PlanReshard("fc1.weight", {8, 4}, mesh, {Replicate{}}, {Shard{2}});
  ASSERT_FALSE(steps.ok());
  EXPECT_EQ(steps.status().code(), StatusCode::kInvalidArgument);
  const std::string m = steps.status().ToString();
  EXPECT_NE(m.find("fc1.weight"), std::string::npos) << m;
  EXPECT_NE(m.find("axis 2"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 2"), std::string::npos) << m;
  auto made = ShardTensor("emb", Dense({4}), mesh, {Shard{1}}, 0);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().ToString().find("'emb'"), std::string::npos);
  EXPECT_NE(made.status().ToString().find("axis 1"), std::string::npos);
  EXPECT_FALSE(PlanReshard("w", {8}, mesh, {Replicate{}, Replicate{}}, {Replicate{}}).ok());
}

// ---- Reshard over Gloo.

// Bytes the calling rank's communicators count for `step` taking a tensor of `shape` from
// `now` (before the step) on `mesh`, with this rank at `coords`: comm_stats.h's payloads, with
// ragged pieces padded to the largest (reshard.h).
uint64_t StepBytes(const ReshardStep& step, const Shape& shape, const ProcessMesh& mesh,
                   const std::vector<Placement>& now, const std::vector<int>& coords) {
  const int parts = mesh.dim_size(step.mesh_dim);
  if (parts == 1) return 0;
  const Shape local = *LocalShape(shape, mesh, now, coords);
  std::vector<Placement> whole = now;
  whole[step.mesh_dim] = Replicate{};
  const Shape level = *LocalShape(shape, mesh, whole, coords);  // before this dimension splits
  auto rest = [&](int skip_a, int skip_b) {
    int64_t n = 1;
    for (int i = 0; i < static_cast<int>(level.size()); ++i) {
      if (i != skip_a && i != skip_b) n *= level[i];
    }
    return n;
  };
  int64_t floats = 0;
  switch (step.kind) {
    case ReshardKind::kAllReduce: {
      floats = 1;
      for (int64_t e : local) floats *= e;
      break;
    }
    case ReshardKind::kReduceScatter:
    case ReshardKind::kAllGather: {
      const int axis = step.kind == ReshardKind::kAllGather ? std::get<Shard>(step.from).axis
                                                            : std::get<Shard>(step.to).axis;
      floats = parts * Ceil(level[axis], parts) * rest(axis, -1);
      break;
    }
    case ReshardKind::kAllToAll: {
      const int a = std::get<Shard>(step.from).axis, b = std::get<Shard>(step.to).axis;
      floats = parts * Ceil(level[a], parts) * Ceil(level[b], parts) * rest(a, b);
      break;
    }
    case ReshardKind::kSlice:
    case ReshardKind::kPartialize:
      break;
  }
  return static_cast<uint64_t>(floats) * sizeof(float);
}

struct Case {
  Shape shape;
  std::vector<Placement> from, to;
};

class ReshardTest : public InprocTrainersTest {
 protected:
  // Every transition among {R, S(0), S(1), P(op)} per mesh dimension, for op in sum, avg, max,
  // on an even [8, 4] and a ragged [6, 5] tensor.
  void RunEveryTransition(const ProcessMesh& mesh) {
    std::vector<Case> cases;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      const std::vector<Placement> one = {Replicate{}, Shard{0}, Shard{1}, Partial{op}};
      std::vector<std::vector<Placement>> all = {{}};
      for (int d = 0; d < mesh.ndim(); ++d) {
        std::vector<std::vector<Placement>> longer;
        for (const auto& prefix : all) {
          for (const Placement& p : one) {
            longer.push_back(prefix);
            longer.back().push_back(p);
          }
        }
        all = std::move(longer);
      }
      for (const Shape& shape : {Shape{8, 4}, Shape{6, 5}}) {
        for (const auto& from : all) {
          for (const auto& to : all) cases.push_back({shape, from, to});
        }
      }
    }
    StartTrainers(mesh.size());
    const int n = mesh.size();
    // results[case][rank]: the local piece and the bytes the rank moved.
    std::vector<std::vector<Tensor>> locals(cases.size(), std::vector<Tensor>(n));
    std::vector<std::vector<uint64_t>> bytes(cases.size(), std::vector<uint64_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        CommunicatorFactory make = [&](const std::string& name, int rank, int size) {
          return MakeGlooCommunicator(*nodes_[r], name, rank, size);
        };
        Result<MeshComms> comms = MakeMeshComms(mesh, r, "auto/test", make);
        ASSERT_TRUE(comms.ok()) << comms.status().ToString();
        for (size_t c = 0; c < cases.size(); ++c) {
          Result<DistTensor> t = ShardTensor("t", Dense(cases[c].shape), mesh, cases[c].from, r);
          ASSERT_TRUE(t.ok()) << t.status().ToString();
          const CommStats before = comms->stats();
          Result<DistTensor> out = Reshard(*t, cases[c].to, *comms);
          ASSERT_TRUE(out.ok()) << out.status().ToString();
          EXPECT_EQ(out->placements(), cases[c].to);
          locals[c][r] = out->local();
          bytes[c][r] = (comms->stats() - before).total_bytes();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (size_t c = 0; c < cases.size(); ++c) Check(mesh, cases[c], locals[c], bytes[c]);
  }

  // Every rank's piece, reduced over the Partial dimensions, is the dense tensor's block; the
  // bytes are the sum of the plan's steps' counts.
  void Check(const ProcessMesh& mesh, const Case& c, const std::vector<Tensor>& locals,
             const std::vector<uint64_t>& bytes) {
    const std::string what = ShapeToString(c.shape) + " " + ToString(c.from) + " -> " +
                             ToString(c.to) + " on " + mesh.ToString();
    const std::vector<ReshardStep> steps = *PlanReshard("t", c.shape, mesh, c.from, c.to);
    std::vector<Placement> dense_placements = c.to;
    ReduceOp op = ReduceOp::kSum;
    for (Placement& p : dense_placements) {
      if (const auto* partial = std::get_if<Partial>(&p)) {
        op = partial->op;
        p = Replicate{};
      }
    }
    const Tensor dense = Dense(c.shape);
    for (int r = 0; r < mesh.size(); ++r) {
      const std::vector<int> coords = mesh.Coords(r);
      // The ranks that hold the same block: equal coordinates off the Partial dimensions.
      std::vector<int> peers;
      for (int q = 0; q < mesh.size(); ++q) {
        const std::vector<int> qc = mesh.Coords(q);
        bool same = true;
        for (int d = 0; d < mesh.ndim(); ++d) {
          if (!std::holds_alternative<Partial>(c.to[d]) && qc[d] != coords[d]) same = false;
        }
        if (same) peers.push_back(q);
      }
      const Tensor want = ShardTensor("t", dense, mesh, dense_placements, r)->local();
      ASSERT_EQ(locals[r].shape(), want.shape()) << what << " rank " << r;
      for (int64_t i = 0; i < want.numel(); ++i) {
        const float got = ReferenceReduce(op, static_cast<int>(peers.size()), [&](int k) {
          return locals[peers[k]].data_as<float>()[i];
        });
        ASSERT_EQ(got, want.data_as<float>()[i]) << what << " rank " << r << " element " << i;
      }
      uint64_t expected = 0;
      std::vector<Placement> now = c.from;
      for (const ReshardStep& step : steps) {
        expected += StepBytes(step, c.shape, mesh, now, coords);
        now[step.mesh_dim] = step.to;
      }
      EXPECT_EQ(bytes[r], expected) << what << " rank " << r << ": " << ToString(steps, mesh);
      // ReshardBytes (what auto plans report) agrees with what was measured.
      EXPECT_EQ(*ReshardBytes("t", c.shape, mesh, c.from, c.to, coords), bytes[r]) << what;
    }
  }
};

TEST_F(ReshardTest, EveryTransitionOn1DMeshOf2) { RunEveryTransition(Mesh({{"x", 2}})); }
TEST_F(ReshardTest, EveryTransitionOn1DMeshOf4) { RunEveryTransition(Mesh({{"x", 4}})); }
TEST_F(ReshardTest, EveryTransitionOn2DMeshOf1x2) { RunEveryTransition(Mesh({{"x", 1}, {"y", 2}})); }
TEST_F(ReshardTest, EveryTransitionOn2DMeshOf2x1) { RunEveryTransition(Mesh({{"x", 2}, {"y", 1}})); }
TEST_F(ReshardTest, EveryTransitionOn2DMeshOf2x2) { RunEveryTransition(Mesh({{"x", 2}, {"y", 2}})); }

// On a 1-D mesh the count needs no plan: the transition names its collective.
TEST_F(ReshardTest, OneDimensionBytesFollowFromTheShapesAlone) {
  constexpr int kRanks = 4;
  const ProcessMesh mesh = Mesh({{"x", kRanks}});
  const Shape shape = {6, 5};  // ragged on 4: rows 2, 2, 1, 1; columns 2, 1, 1, 1
  struct Want {
    Placement from, to;
    uint64_t floats;
  };
  const std::vector<Want> wants = {
      {Partial{}, Replicate{}, 6 * 5},                      // all-reduce of the whole
      {Partial{}, Shard{0}, kRanks * 2 * 5},                // reduce-scatter, rows padded to 2
      {Shard{1}, Replicate{}, kRanks * 6 * 2},              // all-gather, columns padded to 2
      {Shard{0}, Shard{1}, kRanks * 2 * 2},                 // all-to-all, blocks of 2 x 2
      {Replicate{}, Shard{0}, 0},                           // a local slice
  };
  StartTrainers(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      CommunicatorFactory make = [&](const std::string& name, int rank, int size) {
        return MakeGlooCommunicator(*nodes_[r], name, rank, size);
      };
      Result<MeshComms> comms = MakeMeshComms(mesh, r, "auto/bytes", make);
      ASSERT_TRUE(comms.ok()) << comms.status().ToString();
      for (const Want& w : wants) {
        DistTensor t = *ShardTensor("t", Dense(shape), mesh, {w.from}, r);
        const CommStats before = comms->stats();
        ASSERT_TRUE(Reshard(t, {w.to}, *comms).ok());
        EXPECT_EQ((comms->stats() - before).total_bytes(), w.floats * 4)
            << ToString(w.from) << " -> " << ToString(w.to) << " rank " << r;
      }
      // Groups of another mesh are refused, naming the tensor.
      DistTensor t = *ShardTensor("h", Dense(shape), mesh, {Replicate{}}, r);
      MeshComms other;
      other.mesh = Mesh({{"x", 2}, {"y", 2}});
      other.mesh_rank = r;
      Result<DistTensor> bad = Reshard(t, {Shard{0}}, other);
      ASSERT_FALSE(bad.ok());
      EXPECT_NE(bad.status().ToString().find("'h'"), std::string::npos);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace strata
