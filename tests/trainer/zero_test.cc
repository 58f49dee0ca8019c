// zero_test.cc: the pieces of ZeRO in one process: GradBuckets (gradients and values as views
// of padded bucket buffers, kept across a re-layout, released and made again, cleared by
// ZeroGrad), and BucketAllReducer + ShardedOptimizer on 2 and 4 in-process Gloo ranks against
// the replicated optimizer on the averaged gradients (AdamW and SGD with momentum, weight decay
// on some parameters only), the gathered state included.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <ostream>
#include <thread>

#include "tests/trainer/inproc_trainers.h"
#include "trainer/comm/gloo_communicator.h"
#include "trainer/grad_buckets.h"
#include "trainer/grad_sync.h"
#include "trainer/ops/ops.h"
#include "trainer/optim.h"
#include "trainer/sharded_optim.h"

namespace strata {
namespace {

// Sizes that do not divide by 2 or 4, a bias without weight decay, and an element count that
// fills several 64-byte buckets.
void BuildModel(nn::ParameterRegistry& reg) {
  reg.Create("fc1.weight", {5, 7}, InitSpec::Normal(0.5f));
  reg.Create("fc1.bias", {7}, InitSpec::Normal(0.5f), /*weight_decay=*/false);
  reg.Create("fc2.weight", {7, 3}, InitSpec::Normal(0.5f));
  reg.Create("norm.gain", {3}, InitSpec::Constant(1.0f), /*weight_decay=*/false);
}

std::vector<nn::Parameter*> Params(nn::ParameterRegistry& reg) {
  std::vector<nn::Parameter*> out;
  for (auto& p : reg.params()) out.push_back(p.get());
  return out;
}

// Rank r's gradient of step s, element i of parameter k.
float Grad(int rank, int step, size_t k, int64_t i) {
  return std::sin(0.37f * static_cast<float>(i + 1) + 1.3f * static_cast<float>(k) + 0.7f * rank + 0.11f * step);
}

TEST(ZeroGradBuckets, ViewsOfPaddedBucketsSurviveARelayoutAndARelease) {
  nn::ParameterRegistry reg(ops::Exec::Cpu(), 7);
  BuildModel(reg);
  std::vector<std::vector<float>> values;
  for (auto& p : reg.params()) {
    const float* v = p->value.data_as<float>();
    values.emplace_back(v, v + p->value.numel());
    ops::Fill(reg.exec(), p->grad, static_cast<float>(values.size()));
  }
  GradBuckets b(reg.exec(), Params(reg), /*bucket_bytes=*/64, /*shards=*/4, /*values=*/true);
  b.Layout({3, 2, 1, 0});
  const int64_t gen = b.generation();
  auto check = [&](const char* when) {
    for (size_t i = 0; i < b.size(); ++i) {
      EXPECT_EQ(b[i].padded % 4, 0) << when;
      EXPECT_GE(b[i].padded, b[i].floats) << when;
      EXPECT_EQ(b[i].shard * 4, b[i].padded) << when;
      for (const BucketSlot& s : b[i].slots) {
        nn::Parameter& p = *reg.params()[s.param];
        EXPECT_EQ(p.grad.data_as<float>(), b[i].grad.data_as<float>() + s.offset) << when << " " << p.name;
        EXPECT_EQ(p.value.data_as<float>(), b[i].value.data_as<float>() + s.offset) << when << " " << p.name;
        EXPECT_EQ(b.bucket_of(s.param), i);
        for (int64_t j = 0; j < p.value.numel(); ++j) {
          ASSERT_EQ(p.value.data_as<float>()[j], values[s.param][j]) << when << " " << p.name;
          ASSERT_EQ(p.grad.data_as<float>()[j], static_cast<float>(s.param + 1)) << when << " " << p.name;
        }
      }
    }
  };
  check("first layout");
  EXPECT_GT(b.size(), 1u);  // 64 bytes: several buckets
  b.Layout({0, 1, 2, 3});
  EXPECT_EQ(b.generation(), gen + 1);
  check("re-laid");
  // ZeroGrad clears the views, not the padding's neighbours' values.
  reg.ZeroGrad();
  for (size_t i = 0; i < b.size(); ++i) {
    for (int64_t j = 0; j < b[i].padded; ++j) ASSERT_EQ(b[i].grad.data_as<float>()[j], 0.0f);
  }
  b.ReleaseGrads();
  EXPECT_FALSE(b.grads_allocated());
  EXPECT_EQ(b.grad_bytes(), 0);
  for (auto& p : reg.params()) EXPECT_FALSE(p->grad.defined());
  b.AllocateGrads();
  for (size_t i = 0; i < b.size(); ++i) {
    for (const BucketSlot& s : b[i].slots) {
      nn::Parameter& p = *reg.params()[s.param];
      ASSERT_TRUE(p.grad.defined());
      EXPECT_EQ(p.grad.shape(), p.value.shape());
      EXPECT_EQ(p.grad.data_as<float>(), b[i].grad.data_as<float>() + s.offset);
    }
  }
  int64_t padded = 0;
  for (size_t i = 0; i < b.size(); ++i) padded += b[i].padded;
  EXPECT_EQ(b.grad_bytes(), padded * 4);
  EXPECT_EQ(b.value_bytes(), padded * 4);
}

struct ZeroCase {
  int ranks;
  int zero;
  OptimizerOptions::Kind kind;
  friend void PrintTo(const ZeroCase& c, std::ostream* os) {
    *os << c.ranks << " ranks, zero " << c.zero << (c.kind == OptimizerOptions::Kind::kSgd ? ", sgd" : ", adamw");
  }
};

class ZeroShardedOptimizerTest : public InprocTrainersTest, public ::testing::WithParamInterface<ZeroCase> {
 protected:
  void SetUp() override { StartTrainers(GetParam().ranks); }
};

// Three steps with the bucket re-cut after the first (overlap on, gradients reported in
// creation order): the shards' sums of squares add up to the averaged gradients' (clipping),
// every rank's parameters equal the replicated optimizer's on the averaged gradients, and so
// does the gathered state.
TEST_P(ZeroShardedOptimizerTest, MatchesTheReplicatedOptimizerOnAveragedGradients) {
  const auto [n, zero, kind] = GetParam();
  OptimizerOptions o;
  o.kind = kind;
  o.lr = 0.01;
  o.weight_decay = 0.1;
  constexpr int kSteps = 3;
  // The reference: one registry, the average of the ranks' gradients.
  nn::ParameterRegistry ref(ops::Exec::Cpu(), 7);
  BuildModel(ref);
  auto ref_opt = Optimizer::Create(o, ref);
  std::vector<double> ref_sq;  // by step: the averaged gradients' sum of squares
  for (int s = 0; s < kSteps; ++s) {
    for (size_t k = 0; k < ref.params().size(); ++k) {
      Tensor& g = ref.params()[k]->grad;
      for (int64_t i = 0; i < g.numel(); ++i) {
        float sum = 0;
        for (int r = 0; r < n; ++r) sum += Grad(r, s, k, i);
        g.data_as<float>()[i] = sum / static_cast<float>(n);
      }
    }
    ref_sq.push_back(GradSquaredSum(ref));
    ref_opt->Step(o.lr);
  }
  const auto ref_state = ref_opt->State();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = MakeGlooCommunicator(*nodes_[r], "dp", r, n);
      ASSERT_TRUE(comm.ok()) << comm.status().ToString();
      nn::ParameterRegistry reg(ops::Exec::Cpu(), 7);
      BuildModel(reg);
      BucketAllReducer reducer(**comm, Params(reg), reg.exec(), /*bucket_bytes=*/64, /*overlap=*/true, zero, nullptr);
      ShardedOptimizer opt(o, reducer);
      for (int s = 0; s < kSteps; ++s) {
        reducer.BeginStep(s);
        reg.ZeroGrad();
        for (size_t k = 0; k < reg.params().size(); ++k) {
          nn::Parameter& p = *reg.params()[k];
          for (int64_t i = 0; i < p.grad.numel(); ++i) p.grad.data_as<float>()[i] = Grad(r, s, k, i);
          reducer.GradReady(p);
        }
        ASSERT_TRUE(reducer.Finish(s).ok());
        EXPECT_EQ(reducer.buckets().grads_allocated(), zero < 2);
        // Clipping's sum: each element on one rank's shard (none of the parameters is split).
        double sq[2] = {opt.GradSquaredSum(/*split=*/false), opt.GradSquaredSum(/*split=*/true)};
        ASSERT_TRUE((*comm)->AllReduceHost(sq, 2, ReduceOp::kSum).ok());
        EXPECT_EQ(sq[1], 0.0);
        EXPECT_NEAR(sq[0], ref_sq[static_cast<size_t>(s)], 1e-6 * ref_sq[static_cast<size_t>(s)]) << "step " << s;
        opt.Step(o.lr);
        ASSERT_TRUE(reducer.AllGatherParams().ok());
      }
      for (size_t k = 0; k < reg.params().size(); ++k) {
        const Tensor& got = reg.params()[k]->value;
        const Tensor& want = ref.params()[k]->value;
        for (int64_t i = 0; i < got.numel(); ++i) {
          ASSERT_NEAR(got.data_as<float>()[i], want.data_as<float>()[i], 1e-6f)
              << "rank " << r << " " << reg.params()[k]->name << "[" << i << "]";
        }
      }
      ASSERT_TRUE(opt.GatherState().ok());
      const auto state = opt.State();
      ASSERT_EQ(state.size(), ref_state.size());
      for (size_t j = 0; j < state.size(); ++j) {
        EXPECT_EQ(state[j].first, ref_state[j].first);
        for (int64_t i = 0; i < state[j].second.numel(); ++i) {
          ASSERT_NEAR(state[j].second.data_as<float>()[i], ref_state[j].second.data_as<float>()[i], 1e-6f)
              << "rank " << r << " " << state[j].first << "[" << i << "]";
        }
      }
      opt.ReleaseGatheredState();
      EXPECT_GT(opt.state_bytes(), 0);
    });
  }
  for (auto& t : threads) t.join();
}

INSTANTIATE_TEST_SUITE_P(
    Stages, ZeroShardedOptimizerTest,
    ::testing::Values(ZeroCase{2, 1, OptimizerOptions::Kind::kAdamW}, ZeroCase{2, 2, OptimizerOptions::Kind::kAdamW},
                      ZeroCase{4, 1, OptimizerOptions::Kind::kSgd}, ZeroCase{4, 2, OptimizerOptions::Kind::kAdamW}),
    [](const auto& info) {
      return std::to_string(info.param.ranks) + "ranksZero" + std::to_string(info.param.zero) +
             (info.param.kind == OptimizerOptions::Kind::kSgd ? "Sgd" : "AdamW");
    });

}  // namespace
}  // namespace strata
