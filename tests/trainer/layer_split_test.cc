// The split backward (Layer::BackwardInput, then BackwardWeight on the same context) against the
// fused Backward, for every layer: bit for bit on the CPU, with micro-batches interleaved as the
// zero-bubble schedules run them, and each parameter reported ready exactly once per context.
// The same under train.precision bf16 (bf16 matmuls, activations saved in bf16), and bf16 within
// its tolerance of fp32. (Gradient checks of each half against finite differences are in
// gradcheck_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <ostream>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "trainer/nn/layers.h"
#include "trainer/ops/ops.h"
#include "trainer/ops/rng.h"
#include "tests/trainer/random_tensor.h"

namespace strata::nn {
namespace {

const ops::Exec kCpu = ops::Exec::Cpu();

// train.precision bf16 on the CPU.
ops::Exec Bf16() {
  ops::Exec ex = ops::Exec::Cpu();
  ex.matmul = ops::MatmulPrecision::kBf16;
  ex.saved = DType::kBF16;
  return ex;
}

Tensor Random(Shape shape, uint64_t seed, float scale = 1.0f) {
  return testing::RandomTensor(std::move(shape), seed, scale);
}

Tensor Clone(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor c = ops::NewTensor(kCpu, t.shape(), t.dtype());
  std::memcpy(c.data(), t.data(), t.nbytes());
  return c;
}

bool SameBits(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// A layer under test: how to build it (each run builds its own, from the same seed, so every
// run starts from the same parameters) and its input for micro-batch k.
struct Case {
  std::string name;
  std::function<std::unique_ptr<Layer>(ParameterRegistry&)> make;
  std::function<Tensor(int k)> input;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::unique_ptr<Layer> Recomputing(std::unique_ptr<Layer> layer) {
  layer->set_recompute(true);
  return layer;
}

std::vector<Case> Cases() {
  auto rows = [](Shape shape) { return [shape](int k) { return Random(shape, 1000 + k); }; };
  auto ids = [](int k) {
    Tensor t = ops::NewTensor(kCpu, {2, 3}, DType::kI32);
    const int32_t raw[] = {1, 6, 1, 0, 3, 6};  // repeated ids: the scatter adds them up
    for (int i = 0; i < 6; ++i) t.data_as<int32_t>()[i] = (raw[i] + k) % 7;
    return t;
  };
  return {
      {"Linear", [](ParameterRegistry& r) { return std::make_unique<Linear>(r, "fc", 6, 5); },
       rows({2, 3, 6})},
      {"LinearNoBias",
       [](ParameterRegistry& r) { return std::make_unique<Linear>(r, "fc", 6, 5, false); },
       rows({4, 6})},
      {"Embedding", [](ParameterRegistry& r) { return std::make_unique<Embedding>(r, "emb", 7, 4); },
       ids},
      {"LayerNorm", [](ParameterRegistry& r) { return std::make_unique<LayerNorm>(r, "ln", 8); },
       rows({5, 8})},
      {"Relu", [](ParameterRegistry&) { return std::make_unique<Activation>("relu", ActivationKind::kRelu); },
       rows({4, 9})},
      {"Gelu", [](ParameterRegistry&) { return std::make_unique<Activation>("gelu", ActivationKind::kGelu); },
       rows({4, 9})},
      {"Dropout", [](ParameterRegistry&) { return std::make_unique<Dropout>("drop", 0.3f); },
       rows({6, 7})},
      {"Mlp",
       [](ParameterRegistry& r) { return MakeMlp(r, "mlp", 5, 12, 3, ActivationKind::kGelu, 0.1f); },
       rows({4, 5})},
      {"CausalSelfAttention",
       [](ParameterRegistry& r) { return std::make_unique<CausalSelfAttention>(r, "attn", 8, 2, 0.3f, 0.3f); },
       rows({2, 5, 8})},
      {"TransformerBlock",
       [](ParameterRegistry& r) { return std::make_unique<TransformerBlock>(r, "block", 8, 2, 1, 0.1f); },
       rows({2, 4, 8})},
      {"TransformerBlockRecompute",
       [](ParameterRegistry& r) {
         return Recomputing(std::make_unique<TransformerBlock>(r, "block", 8, 2, 1, 0.1f));
       },
       rows({2, 4, 8})},
      // Nested: a recomputing block inside a sequence, beside a plain one and a recomputing head.
      {"Stack",
       [](ParameterRegistry& r) {
         auto s = std::make_unique<Sequential>("stack");
         s->Add(Recomputing(std::make_unique<TransformerBlock>(r, "b0", 8, 2, 2, 0.1f)));
         s->Add(std::make_unique<TransformerBlock>(r, "b1", 8, 2, 2, 0.1f));
         s->Add(Recomputing(std::make_unique<Linear>(r, "head", 8, 3)));
         return s;
       },
       rows({2, 4, 8})},
  };
}

// F B F B .. (fused); F F .. I I .. W W .. (split, interleaved as a zero-bubble schedule may).
enum class Order { kFused, kSplitInterleaved };

// What a run leaves: each micro-batch's dx, every parameter's gradient summed over the
// micro-batches, and how often each parameter was reported ready (in all, and before any W).
struct Outcome {
  std::vector<Tensor> dx;
  std::vector<Tensor> grads;
  std::map<std::string, int> ready;
  int ready_before_weight = 0;
  bool grads_zero_before_weight = true;
};

Outcome RunLayer(const Case& c, Order order, int micro_batches, const ops::Exec& ex = kCpu) {
  ParameterRegistry reg(kCpu, 17);
  std::unique_ptr<Layer> layer = c.make(reg);
  uint64_t seed = 300;
  for (auto& p : reg.params()) {  // away from ones and zeros, so every term of each gradient counts
    ops::Axpy(kCpu, 1.0f, Random(p->value.shape(), ++seed, 0.2f), p->value);
  }
  Outcome out;
  std::vector<std::unique_ptr<Context>> ctx;
  std::vector<Tensor> dy(micro_batches);
  for (int k = 0; k < micro_batches; ++k) {
    ctx.push_back(std::make_unique<Context>(ex, true, 100 + k));  // dropout masks differ per k
    ctx[k]->set_grad_ready([&out](Parameter& p) { ++out.ready[p.name]; });
  }
  auto forward = [&](int k) {
    Tensor y = layer->Forward(c.input(k), *ctx[k]);
    dy[k] = Random(y.shape(), 2000 + k);
  };
  out.dx.resize(micro_batches);
  if (order == Order::kFused) {
    for (int k = 0; k < micro_batches; ++k) {
      forward(k);
      out.dx[k] = Clone(layer->Backward(dy[k], *ctx[k]));
    }
  } else {
    for (int k = 0; k < micro_batches; ++k) forward(k);
    for (int k = 0; k < micro_batches; ++k) out.dx[k] = Clone(layer->BackwardInput(dy[k], *ctx[k]));
    for (auto& [name, n] : out.ready) out.ready_before_weight += n;
    for (auto& p : reg.params()) out.grads_zero_before_weight &= ops::SumSquares(kCpu, p->grad) == 0;
    for (int k = 0; k < micro_batches; ++k) layer->BackwardWeight(*ctx[k]);
  }
  for (auto& p : reg.params()) out.grads.push_back(Clone(p->grad));
  for (auto& p : reg.params()) out.ready.try_emplace(p->name, 0);  // so a missing report shows
  return out;
}

class EveryLayerSplitTest : public ::testing::TestWithParam<Case> {};

// The zero-bubble schedules' pattern on one stage: F(0) F(1) F(2) I(0) I(1) I(2) W(0) W(1) W(2)
// must leave exactly what F(0) B(0) F(1) B(1) F(2) B(2) leaves; with one micro-batch, I then W
// equals B. (Three, not two: 0 + a + b is b + a + 0 in floats, so two would not notice the
// weight halves running out of order.)
TEST_P(EveryLayerSplitTest, SplitEqualsFusedBitForBit) {
  for (int micro_batches : {1, 3}) {
    SCOPED_TRACE(std::to_string(micro_batches) + " micro-batches");
    Outcome fused = RunLayer(GetParam(), Order::kFused, micro_batches);
    Outcome split = RunLayer(GetParam(), Order::kSplitInterleaved, micro_batches);
    for (int k = 0; k < micro_batches; ++k) EXPECT_TRUE(SameBits(fused.dx[k], split.dx[k])) << "dx of " << k;
    ASSERT_EQ(fused.grads.size(), split.grads.size());
    ParameterRegistry names(kCpu, 17);
    auto layer = GetParam().make(names);
    for (size_t i = 0; i < fused.grads.size(); ++i) {
      EXPECT_TRUE(SameBits(fused.grads[i], split.grads[i])) << names.params()[i]->name;
    }
  }
}

TEST_P(EveryLayerSplitTest, SplitEqualsFusedBitForBitInBf16) {
  Outcome fused = RunLayer(GetParam(), Order::kFused, 3, Bf16());
  Outcome split = RunLayer(GetParam(), Order::kSplitInterleaved, 3, Bf16());
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(SameBits(fused.dx[k], split.dx[k])) << "dx of " << k;
  ASSERT_EQ(fused.grads.size(), split.grads.size());
  for (size_t i = 0; i < fused.grads.size(); ++i) EXPECT_TRUE(SameBits(fused.grads[i], split.grads[i])) << i;
}

using testing::RelativeError;

// bf16 keeps 8 significant bits: a rounding is off by at most 2^-9 of its value, and sums of
// such errors over a dot product stay near that in relative terms. Every dx and gradient must
// be within 2^-5 (3%) of fp32's, and not equal to it where a matmul or a saved activation
// played a part (the bf16 path must be the one that ran).
TEST_P(EveryLayerSplitTest, Bf16IsWithinItsToleranceOfFp32) {
  Outcome fp32 = RunLayer(GetParam(), Order::kFused, 2);
  Outcome bf16 = RunLayer(GetParam(), Order::kFused, 2, Bf16());
  double worst = 0;
  for (int k = 0; k < 2; ++k) {
    if (fp32.dx[k].defined()) worst = std::max(worst, RelativeError(bf16.dx[k], fp32.dx[k]));
  }
  for (size_t i = 0; i < fp32.grads.size(); ++i) worst = std::max(worst, RelativeError(bf16.grads[i], fp32.grads[i]));
  EXPECT_LE(worst, 0x1p-5);
  const std::string name = GetParam().name;
  if (name != "Dropout" && name != "Embedding" && name != "Relu") {
    EXPECT_GT(worst, 0.0) << "bf16 gave fp32's results exactly";
  }
}

// Each parameter is reported once per context, after its gradient is final: in the split path
// that is after BackwardWeight, so nothing is reported, nor accumulated, by BackwardInput.
TEST_P(EveryLayerSplitTest, GradReadyOncePerContextAfterWeight) {
  for (Order order : {Order::kFused, Order::kSplitInterleaved}) {
    Outcome out = RunLayer(GetParam(), order, 2);
    for (auto& [name, n] : out.ready) EXPECT_EQ(n, 2) << name;
    EXPECT_EQ(out.ready_before_weight, 0);
    EXPECT_TRUE(out.grads_zero_before_weight);
  }
}

INSTANTIATE_TEST_SUITE_P(Layers, EveryLayerSplitTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(LayerSplitTest, EmbeddingInputHalfReturnsNoGradient) {
  ParameterRegistry reg(kCpu, 1);
  Embedding emb(reg, "emb", 7, 4);
  Context ctx(kCpu, true, 0);
  Tensor ids = ops::NewZeros(kCpu, {3}, DType::kI32);
  Tensor y = emb.Forward(ids, ctx);
  EXPECT_FALSE(emb.BackwardInput(Random(y.shape(), 1), ctx).defined());
  emb.BackwardWeight(ctx);
  EXPECT_GT(ops::SumSquares(kCpu, emb.table().grad), 0);
}

// A recomputing layer keeps its scratch context from BackwardInput to BackwardWeight (the weight
// half needs the recomputed inputs), frees it after, and gives what the plain layer gives, in
// fp32 and under bf16.
TEST(LayerSplitTest, RecomputeKeepsScratchUntilWeightHalf) {
  for (const ops::Exec& ex : {kCpu, Bf16()}) {
    SCOPED_TRACE(ex.saved == DType::kBF16 ? "bf16" : "fp32");
    auto run = [&ex](bool recompute, size_t* saved_after_forward, size_t* saved_between,
                     size_t* saved_after) {
      ParameterRegistry reg(kCpu, 3);
      TransformerBlock block(reg, "block", 8, 2, 1, 0.1f);
      block.set_recompute(recompute);
      Context ctx(ex, true, 5);
      Tensor y = block.Forward(Random({2, 4, 8}, 9), ctx);
      *saved_after_forward = ctx.num_saved();
      Tensor dx = Clone(block.BackwardInput(Random(y.shape(), 10), ctx));
      *saved_between = ctx.num_saved();
      block.BackwardWeight(ctx);
      *saved_after = ctx.num_saved();
      std::vector<Tensor> all{dx};
      for (auto& p : reg.params()) all.push_back(Clone(p->grad));
      return all;
    };
    size_t plain_forward, plain_between, plain_after, re_forward, re_between, re_after;
    std::vector<Tensor> plain = run(false, &plain_forward, &plain_between, &plain_after);
    std::vector<Tensor> recomputed = run(true, &re_forward, &re_between, &re_after);
    ASSERT_EQ(plain.size(), recomputed.size());
    for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(SameBits(plain[i], recomputed[i])) << i;
    EXPECT_EQ(re_forward, 1u);  // only the input
    // Between the halves both hold what the weight half needs (the recomputing one, its input
    // too): the input half dropped what only it needed (attention's q, k, v and probabilities,
    // the activation's input: 5 tensors) and kept dy for each Linear and LayerNorm (6).
    EXPECT_EQ(plain_between, plain_forward - 5 + 6);
    EXPECT_EQ(re_between, plain_between + 1);
    EXPECT_EQ(re_after, 1u);  // the scratch context is gone
  }
}

// Under bf16 a block keeps its activations in half the bytes; only the norms' statistics (mean
// and rstd, one float per row each, two norms) stay f32. Not training, nothing is narrowed.
TEST(LayerSplitTest, Bf16KeepsTheActivationsInHalfTheBytes) {
  auto saved = [](const ops::Exec& ex, bool training) {
    ParameterRegistry reg(kCpu, 3);
    TransformerBlock block(reg, "block", 8, 2, 1, 0.1f);
    Context ctx(ex, training, 5);
    block.Forward(Random({2, 4, 8}, 9), ctx);
    return ctx.saved_bytes();
  };
  const int64_t fp32 = saved(kCpu, true), bf16 = saved(Bf16(), true);
  const int64_t stats = 2 * 2 * 8 * static_cast<int64_t>(sizeof(float));  // 2 norms x (mean, rstd) x 8 rows
  EXPECT_EQ(bf16, (fp32 - stats) / 2 + stats);
  EXPECT_EQ(saved(Bf16(), false), saved(kCpu, false));
}

TEST(LayerSplitTest, SavedActivationsComeBackAsTheirBf16Rounding) {
  Context ctx(Bf16(), true, 0);
  Tensor x = Random({3, 5}, 4);
  int owner = 0;
  ctx.SaveActivation(&owner, "x", x);
  ctx.Save(&owner, "exact", x);
  EXPECT_EQ(ctx.saved_bytes(), 15 * 2 + 15 * 4);
  Tensor back = ctx.Get(&owner, "x");
  ASSERT_EQ(back.dtype(), DType::kF32);
  ASSERT_EQ(back.shape(), x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float v = x.data_as<float>()[i];
    EXPECT_EQ(back.data_as<float>()[i], BF16ToFloat(FloatToBF16(v))) << i;
  }
  EXPECT_TRUE(SameBits(ctx.Get(&owner, "exact"), x));
  EXPECT_EQ(ctx.Get(&owner, "exact").data(), x.data());  // kept, not copied
}

}  // namespace
}  // namespace strata::nn
