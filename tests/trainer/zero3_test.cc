// zero3_test.cc: ZeRO-3's pieces in one process: GradBuckets cut at given positions with each
// bucket's values and gradients released and made again on their own; and Zero3Sync on 2 and 4
// in-process Gloo ranks training the mlp: between units' computations only the shards exist
// (the last unit's values kept from its forward to its backward, every value freed after
// backward, every gradient freed once reduce-scattered), the gradient shards are the average
// of the ranks' gradients, and after ShardedOptimizer's step the gathered parameters equal the
// replicated optimizer's on the averaged gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "tests/trainer/inproc_trainers.h"
#include "trainer/comm/gloo_communicator.h"
#include "trainer/grad_buckets.h"
#include "trainer/models/model.h"
#include "trainer/ops/ops.h"
#include "trainer/optim.h"
#include "trainer/sharded_optim.h"
#include "trainer/zero3.h"

namespace strata {
namespace {

TEST(Zero3GradBuckets, CutsStartBucketsAndEachBucketReleasesOnItsOwn) {
  nn::ParameterRegistry reg(ops::Exec::Cpu(), 3);
  reg.Create("a", {3, 5}, InitSpec::Normal(0.5f));
  reg.Create("b", {5}, InitSpec::Normal(0.5f));
  reg.Create("c", {5, 2}, InitSpec::Normal(0.5f));
  std::vector<nn::Parameter*> params;
  std::vector<std::vector<float>> values;
  for (auto& p : reg.params()) {
    params.push_back(p.get());
    values.emplace_back(p->value.data_as<float>(), p->value.data_as<float>() + p->value.numel());
  }
  GradBuckets b(reg.exec(), params, SIZE_MAX, /*shards=*/4, /*values=*/true);
  b.Layout({2, 1, 0}, {true, true, false});  // [c] [b a]
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].floats, 10);
  EXPECT_EQ(b[1].floats, 20);
  EXPECT_EQ(b[0].padded, 12);
  EXPECT_EQ(b.bucket_of(0), 1u);
  EXPECT_EQ(b.bucket_of(2), 0u);
  b.ReleaseValues(1);
  b.ReleaseGrads(0);
  EXPECT_FALSE(reg.params()[0]->value.defined());
  EXPECT_FALSE(reg.params()[1]->value.defined());
  EXPECT_TRUE(reg.params()[2]->value.defined());
  EXPECT_FALSE(reg.params()[2]->grad.defined());
  EXPECT_FALSE(b.grads_allocated());
  EXPECT_EQ(b.value_bytes(), 12 * 4);
  EXPECT_EQ(reg.NumElements(), 30);  // from the shapes, whatever is released
  reg.ZeroGrad();                     // skips the released gradients
  b.AllocateValues(1);
  b.AllocateGrads(0);
  for (size_t k : {0u, 1u}) {
    nn::Parameter& p = *reg.params()[k];
    ASSERT_TRUE(p.value.defined());
    EXPECT_EQ(p.value.shape(), p.grad.shape());
    EXPECT_EQ(p.value.data_as<float>(), b[1].value.data_as<float>() + b[1].slots[k == 0 ? 1 : 0].offset);
  }
  for (int64_t i = 0; i < b[0].padded; ++i) EXPECT_EQ(b[0].grad.data_as<float>()[i], 0.0f);
  // The bucket that stayed kept its values.
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(reg.params()[2]->value.data_as<float>()[i], values[2][i]);
}

ModelOptions Mlp() {
  ModelOptions o;
  o.kind = ModelOptions::Kind::kMlp;
  o.mlp_in = 9;
  o.mlp_hidden = 27;  // 9*27+27 and 27*5+5 floats: neither divides by 4
  o.mlp_out = 5;
  return o;
}

// Rank r's batch of step s: 6 samples.
Batch MakeBatch(int rank, int step) {
  Batch b;
  b.samples = 6;
  b.x = ops::NewTensor(ops::Exec::Cpu(), {6, 9});
  b.target = ops::NewTensor(ops::Exec::Cpu(), {6, 5});
  for (int64_t i = 0; i < b.x.numel(); ++i) b.x.data_as<float>()[i] = std::sin(0.3f * i + rank + 0.5f * step);
  for (int64_t i = 0; i < b.target.numel(); ++i) b.target.data_as<float>()[i] = std::cos(0.7f * i - rank + step);
  return b;
}

class Zero3SyncTest : public InprocTrainersTest, public ::testing::WithParamInterface<int> {
 protected:
  void SetUp() override { StartTrainers(GetParam()); }
};

TEST_P(Zero3SyncTest, ShardsOnlyBetweenUnitsAndTheReplicatedOptimizersResult) {
  const int n = GetParam();
  constexpr int kSteps = 3;
  OptimizerOptions o;
  // SGD with momentum: linear in the gradient, so the reduce-scatter's other order of sums
  // stays at rounding (AdamW magnifies it on near-zero gradients; the integration tests
  // compare AdamW runs whole).
  o.kind = OptimizerOptions::Kind::kSgd;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.weight_decay = 0.1;
  // The reference: one model, gradients averaged over the ranks' batches (each scaled 1/n).
  auto ref = CreateModel(Mlp(), ops::Exec::Cpu());
  ASSERT_TRUE(ref.ok());
  auto ref_opt = Optimizer::Create(o, (*ref)->params());
  for (int s = 0; s < kSteps; ++s) {
    (*ref)->params().ZeroGrad();
    for (int r = 0; r < n; ++r) {
      nn::Context ctx((*ref)->exec(), true, 1);
      (*ref)->ForwardBackward(MakeBatch(r, s), ctx, 1.0f / static_cast<float>(n));
    }
    ref_opt->Step(o.lr);
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = MakeGlooCommunicator(*nodes_[r], "dp", r, n);
      ASSERT_TRUE(comm.ok()) << comm.status().ToString();
      auto model_or = CreateModel(Mlp(), ops::Exec::Cpu());
      ASSERT_TRUE(model_or.ok());
      Model& model = **model_or;
      Zero3Sync z(**comm, model, /*prefetch=*/true, nullptr);
      ShardedOptimizer opt(o, z);
      ASSERT_EQ(z.buckets().size(), 2u);  // fc1, fc2 (the activation has no parameters)
      auto& params = model.params().params();
      auto values_defined = [&](const std::string& prefix) {
        int defined = 0;
        for (auto& p : params) defined += p->name.starts_with(prefix) && p->value.defined();
        return defined;
      };
      EXPECT_EQ(values_defined("mlp."), 0) << "only shards after construction";
      for (int s = 0; s < kSteps; ++s) {
        z.BeginStep(s);
        model.params().ZeroGrad();
        nn::Context ctx(model.exec(), true, 1);
        ctx.set_grad_ready([&](nn::Parameter& p) { z.GradReady(p); });
        const Batch b = MakeBatch(r, s);
        Tensor out = model.ForwardUnits({0, model.num_units()}, b, Tensor(), ctx);
        EXPECT_EQ(values_defined("mlp.fc1"), 0) << "fc1 freed after its forward";
        EXPECT_EQ(values_defined("mlp.fc2"), 2) << "fc2 kept for the backward that follows";
        model.loss_head().Forward(out, b.target, ctx, 1.0f);  // the reduce-scatter averages
        model.BackwardUnits({0, model.num_units()}, model.loss_head().Backward(ctx), ctx, BackwardPart::kFull);
        EXPECT_EQ(values_defined("mlp."), 0) << "every unit freed after its backward";
        ASSERT_TRUE(z.Finish(s).ok());
        for (auto& p : params) EXPECT_FALSE(p->grad.defined()) << p->name << " freed once reduced";
        opt.Step(o.lr);
      }
      EXPECT_EQ(z.gathers(), kSteps * 3);  // fc1, fc2 in forward; fc1 again in backward
      // The full parameters, gathered, equal the replicated optimizer's.
      ASSERT_TRUE(z.GatherAll().ok());
      for (size_t k = 0; k < params.size(); ++k) {
        const Tensor& got = params[k]->value;
        const Tensor& want = (*ref)->params().params()[k]->value;
        ASSERT_EQ(got.numel(), want.numel());
        for (int64_t i = 0; i < got.numel(); ++i) {
          ASSERT_NEAR(got.data_as<float>()[i], want.data_as<float>()[i], 1e-6f)
              << "rank " << r << " " << params[k]->name << "[" << i << "]";
        }
      }
      ASSERT_TRUE(z.ReleaseAll(/*take=*/false).ok());
      EXPECT_EQ(values_defined("mlp."), 0);
      int64_t psi = 0;
      for (auto& p : params) psi += *ShapeNumel(p->shard.LocalShape());
      EXPECT_NEAR(static_cast<double>(z.value_shard_bytes()), psi * 4.0 / n, 4.0 * 2);  // padding
      EXPECT_EQ(z.value_shard_bytes(), z.grad_shard_bytes());
    });
  }
  for (auto& t : threads) t.join();
}

INSTANTIATE_TEST_SUITE_P(Ranks, Zero3SyncTest, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

}  // namespace
}  // namespace strata
