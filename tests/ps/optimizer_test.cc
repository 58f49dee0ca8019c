// optimizer_test.cc: every server-side optimizer's vectorised kernel against the scalar
// double-precision reference, over several steps, with weight decay and clipping; and the
// table helpers (validation, partitioning, deterministic initializers).
#include "ps/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace strata {
namespace {

struct Case {
  const char* name;
  OptimizerSpec spec;
};

std::vector<Case> Cases() {
  std::vector<Case> c;
  OptimizerSpec o;
  o.lr = 0.05f;
  c.push_back({"sgd", o});
  o.momentum = 0.9f;
  c.push_back({"sgd_momentum", o});
  o.weight_decay = 0.01f;
  c.push_back({"sgd_momentum_wd", o});
  o = {};
  o.kind = OptimizerKind::kAdagrad;
  o.lr = 0.1f;
  c.push_back({"adagrad", o});
  o.kind = OptimizerKind::kAdam;
  o.lr = 0.01f;
  c.push_back({"adam", o});
  o.weight_decay = 0.1f;
  c.push_back({"adam_l2", o});
  o.kind = OptimizerKind::kAdamW;
  c.push_back({"adamw", o});
  o.clip_norm = 0.5f;
  c.push_back({"adamw_clipped", o});
  o = {};
  o.lr = 0.1f;
  o.clip_norm = 0.1f;
  c.push_back({"sgd_clipped", o});
  return c;
}

class OptimizerTest : public ::testing::TestWithParam<Case> {};

TEST_P(OptimizerTest, KernelMatchesReference) {
  TableSpec t;
  t.dim = 37;  // not a multiple of the vector width: exercises the tails
  t.optimizer = GetParam().spec;
  const int slots = t.StateSlots();
  const int width = t.RecordWidth();
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> fast(width), ref(width);
  for (int i = 0; i < static_cast<int>(t.dim); ++i) fast[i] = normal(rng);
  if (t.optimizer.kind == OptimizerKind::kAdagrad) {
    for (int i = 0; i < static_cast<int>(t.dim); ++i) fast[t.dim + i] = t.optimizer.initial_accumulator;
  }
  SetRecordStep(fast, 0);
  ref = fast;
  std::vector<float> grad(t.dim);
  for (int step = 0; step < 20; ++step) {
    for (float& g : grad) g = normal(rng);
    ApplyUpdate(t.optimizer, slots, fast, t.dim, grad.data(), 0.5f);
    ApplyUpdateReference(t.optimizer, slots, ref, t.dim, grad.data(), 0.5f);
  }
  EXPECT_EQ(RecordStep(fast), 20u);
  EXPECT_EQ(RecordStep(ref), 20u);
  for (int i = 0; i < width - 1; ++i) {
    EXPECT_NEAR(fast[i], ref[i], 1e-4f * (1 + std::abs(ref[i]))) << GetParam().name << " [" << i << "]";
  }
}

TEST_P(OptimizerTest, MovesAgainstTheGradient) {
  TableSpec t;
  t.dim = 8;
  t.optimizer = GetParam().spec;
  std::vector<float> r(t.RecordWidth(), 0.0f);
  if (t.optimizer.kind == OptimizerKind::kAdagrad) {
    for (int i = 0; i < 8; ++i) r[8 + i] = t.optimizer.initial_accumulator;
  }
  std::vector<float> grad(8, 1.0f);
  ApplyUpdate(t.optimizer, t.StateSlots(), r, 8, grad.data(), 1.0f);
  for (int i = 0; i < 8; ++i) EXPECT_LT(r[i], 0.0f) << GetParam().name;
}

INSTANTIATE_TEST_SUITE_P(All, OptimizerTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(OptimizerTest, ClippingBoundsTheStep) {
  OptimizerSpec o;
  o.lr = 1.0f;
  o.clip_norm = 1.0f;
  std::vector<float> r(4 + 1, 0.0f), grad = {30, 40, 0, 0};  // norm 50
  ApplyUpdate(o, 0, r, 4, grad.data(), 1.0f);
  EXPECT_NEAR(r[0], -0.6f, 1e-6f);
  EXPECT_NEAR(r[1], -0.8f, 1e-6f);
}

TEST(TableSpec, ValidationNamesTheField) {
  TableSpec t;
  t.name = "emb";
  t.dim = 0;
  EXPECT_NE(t.Validate().message().find("dim"), std::string::npos);
  t.dim = 16;
  EXPECT_TRUE(t.Validate().ok());
  t.optimizer.lr = -1;
  EXPECT_NE(t.Validate().message().find("optimizer.lr"), std::string::npos);
  t.optimizer.lr = 0.1f;
  t.kind = TableKind::kDense;
  EXPECT_NE(t.Validate().message().find("numel"), std::string::npos);
  t.numel = 10;
  t.init = InitSpec::Of(InitKind::kUniform, 1.0f, 0.0f, 1);
  EXPECT_NE(t.Validate().message().find("uniform"), std::string::npos);
}

TEST(TableSpec, RecordLayout) {
  TableSpec t;
  t.dim = 16;
  EXPECT_EQ(t.RecordWidth(), 17);
  t.optimizer.kind = OptimizerKind::kAdam;
  EXPECT_EQ(t.RecordWidth(), 16 * 3 + 1);
  t.kind = TableKind::kDense;
  t.numel = 10;
  t.chunk_floats = 4;
  EXPECT_EQ(t.NumChunks(), 3u);
  EXPECT_EQ(t.ChunkLength(2), 2u);
}

TEST(Partition, SequentialIdsSpreadEvenly) {
  for (uint32_t servers : {2u, 3u, 7u}) {
    std::vector<int> count(servers);
    const int n = 70000;
    for (int k = 0; k < n; ++k) ++count[SparseServer(static_cast<uint64_t>(k) * 1000, servers)];
    for (int c : count) EXPECT_NEAR(c, n / servers, n / servers * 0.05) << servers << " servers";
  }
}

TEST(Partition, InitializersAreDeterministicPerKey) {
  InitSpec init = InitSpec::Of(InitKind::kNormal, 0.0f, 1.0f, 42);
  std::vector<float> a(64), b(64), c(64);
  InitValues(init, 7, a);
  InitValues(init, 7, b);
  InitValues(init, 8, c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double mean = 0, var = 0;
  std::vector<float> big(20000);
  InitValues(init, 1, big);
  for (float x : big) mean += x;
  mean /= big.size();
  for (float x : big) var += (x - mean) * (x - mean);
  var /= big.size();
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_NEAR(var, 1.0, 0.05);
  // Dense values depend on the element index only, not on chunking.
  std::vector<float> whole(10), part(4);
  InitDenseValues(init, 0, whole);
  InitDenseValues(init, 6, part);
  EXPECT_EQ(std::vector<float>(whole.begin() + 6, whole.end()), part);
}

}  // namespace
}  // namespace strata
