// Gradient checks for every layer in trainer/nn: the analytic backward, fused and split in its
// two halves, against central finite differences of L = sum(forward(x) * r), with the probe
// loss accumulated in float64.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "trainer/nn/layers.h"
#include "trainer/nn/loss.h"
#include "trainer/ops/ops.h"
#include "trainer/ops/rng.h"
#include "tests/trainer/random_tensor.h"

namespace strata::nn {
namespace {

const ops::Exec kCpu = ops::Exec::Cpu();

Tensor Random(Shape shape, uint64_t seed, float scale = 1.0f) {
  return testing::RandomTensor(std::move(shape), seed, scale);
}

double Dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += static_cast<double>(a.data_as<float>()[i]) * b.data_as<float>()[i];
  return s;
}

struct CheckResult {
  double worst = 0;  // max |analytic - numeric| / max(|analytic|, |numeric|, floor)
  std::string where;
  int probes = 0;
};

// How the analytic gradients are computed: Backward, or BackwardInput (dx is taken from it
// alone, before the weight half runs) then BackwardWeight (the parameters' gradients).
enum class Mode { kFused, kSplit };
const Mode kModes[] = {Mode::kFused, Mode::kSplit};
std::string ModeName(Mode m) { return m == Mode::kFused ? "fused" : "split"; }

Tensor Clone(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor c = ops::NewTensor(kCpu, t.shape(), t.dtype());
  std::memcpy(c.data(), t.data(), t.nbytes());
  return c;
}

// Compares analytic gradients (scaled by `tamper`, 1 for a real check) to central differences
// at up to `probes` coordinates of x (if differentiable) and of every parameter.
CheckResult GradCheck(Layer& layer, ParameterRegistry& reg, const Tensor& x, bool x_grad,
                      Mode mode = Mode::kFused, double tamper = 1.0, double eps = 1e-3,
                      int probes = 16) {
  auto run = [&](Context& ctx) { return layer.Forward(x, ctx); };
  Context ctx0(kCpu, true, 7);
  Tensor y = run(ctx0);
  Tensor r = Random(y.shape(), 99);
  auto loss = [&] {
    Context c(kCpu, true, 7);
    return Dot(run(c), r);
  };
  reg.ZeroGrad();
  Tensor dx;
  if (mode == Mode::kFused) {
    dx = layer.Backward(r, ctx0);
  } else {
    dx = Clone(layer.BackwardInput(r, ctx0));
    layer.BackwardWeight(ctx0);
  }
  std::vector<std::pair<std::string, std::pair<Tensor, Tensor>>> targets;  // (name, (value, grad))
  if (x_grad) targets.push_back({"input", {x, dx}});
  for (auto& p : reg.params()) targets.push_back({p->name, {p->value, p->grad}});
  CheckResult result;
  result.where = ModeName(mode) + ": ";
  rng::Stream pick(123);
  for (auto& [name, vg] : targets) {
    auto [value, grad] = vg;
    for (int i = 0; i < std::min<int64_t>(probes, value.numel()); ++i) {
      const int64_t idx = value.numel() <= probes ? i : static_cast<int64_t>(pick.Next() % value.numel());
      float* v = value.data_as<float>() + idx;
      const float saved = *v;
      *v = saved + static_cast<float>(eps);
      const double lp = loss();
      *v = saved - static_cast<float>(eps);
      const double lm = loss();
      *v = saved;
      const double numeric = (lp - lm) / (2 * eps);
      const double analytic = tamper * grad.data_as<float>()[idx];
      const double err = std::abs(analytic - numeric) /
                         std::max({std::abs(analytic), std::abs(numeric), 0.05});
      ++result.probes;
      if (err > result.worst) {
        result.worst = err;
        result.where = ModeName(mode) + ": " + name + "[" + std::to_string(idx) + "] analytic " + std::to_string(analytic) +
                       " numeric " + std::to_string(numeric);
      }
    }
  }
  return result;
}

constexpr double kTol = 1e-2;

#define EXPECT_GRADS_OK(res) \
  EXPECT_LT((res).worst, kTol) << (res).where << " (" << (res).probes << " probes)"

TEST(GradCheckTest, Linear) {
  ParameterRegistry reg(kCpu, 1);
  Linear layer(reg, "fc", 6, 5);
  ops::Fill(kCpu, layer.bias()->value, 0.3f);
  for (Mode m : kModes) EXPECT_GRADS_OK(GradCheck(layer, reg, Random({2, 3, 6}, 2), true, m));
}

TEST(GradCheckTest, TamperedGradientFails) {
  ParameterRegistry reg(kCpu, 1);
  Linear layer(reg, "fc", 6, 5);
  for (Mode m : kModes) {
    CheckResult res = GradCheck(layer, reg, Random({4, 6}, 2), true, m, /*tamper=*/1.05);
    EXPECT_GT(res.worst, kTol) << "the checker must catch a 5% error";
  }
}

TEST(GradCheckTest, Embedding) {
  ParameterRegistry reg(kCpu, 1);
  Embedding layer(reg, "emb", 7, 4, 1.0f);
  Tensor ids = ops::NewTensor(kCpu, {2, 3}, DType::kI32);
  int32_t raw[] = {1, 6, 1, 0, 3, 6};
  for (int i = 0; i < 6; ++i) ids.data_as<int32_t>()[i] = raw[i];
  for (Mode m : kModes) EXPECT_GRADS_OK(GradCheck(layer, reg, ids, false, m));
}

TEST(GradCheckTest, LayerNorm) {
  ParameterRegistry reg(kCpu, 1);
  LayerNorm layer(reg, "ln", 8);
  for (auto& p : reg.params()) {
    Tensor noise = Random(p->value.shape(), 5, 0.5f);
    ops::Axpy(kCpu, 1.0f, noise, p->value);
  }
  for (Mode m : kModes) EXPECT_GRADS_OK(GradCheck(layer, reg, Random({5, 8}, 3), true, m));
}

TEST(GradCheckTest, Activations) {
  ParameterRegistry reg(kCpu, 1);
  Activation relu("relu", ActivationKind::kRelu), gelu("gelu", ActivationKind::kGelu);
  for (Mode m : kModes) {
    EXPECT_GRADS_OK(GradCheck(relu, reg, Random({4, 9}, 4), true, m));
    EXPECT_GRADS_OK(GradCheck(gelu, reg, Random({4, 9}, 5), true, m));
  }
}

TEST(GradCheckTest, Dropout) {
  ParameterRegistry reg(kCpu, 1);
  Dropout layer("drop", 0.3f);
  for (Mode m : kModes) EXPECT_GRADS_OK(GradCheck(layer, reg, Random({6, 7}, 6), true, m));
}

TEST(GradCheckTest, Mlp) {
  ParameterRegistry reg(kCpu, 1);
  auto mlp = MakeMlp(reg, "mlp", 5, 12, 3, ActivationKind::kGelu, 0.1f);
  for (Mode m : kModes) EXPECT_GRADS_OK(GradCheck(*mlp, reg, Random({4, 5}, 7), true, m));
}

TEST(GradCheckTest, CausalSelfAttention) {
  ParameterRegistry reg(kCpu, 1);
  CausalSelfAttention layer(reg, "attn", 8, 2, 0.3f, 0.3f);
  for (Mode m : kModes) EXPECT_GRADS_OK(GradCheck(layer, reg, Random({2, 5, 8}, 8), true, m));
}

TEST(GradCheckTest, TransformerBlock) {
  ParameterRegistry reg(kCpu, 1);
  TransformerBlock layer(reg, "block", 8, 2, 1);
  for (auto& p : reg.params()) {  // larger weights than GPT's init so every path matters
    Tensor noise = Random(p->value.shape(), 11, 0.2f);
    ops::Axpy(kCpu, 1.0f, noise, p->value);
  }
  // A larger step: the block's f32 forward rounds at ~1e-6 of a loss of ~10, which a 1e-3
  // step would turn into ~5e-3 of gradient noise; the truncation error at 1e-2 is ~1e-5.
  for (Mode m : kModes) {
    EXPECT_GRADS_OK(GradCheck(layer, reg, Random({2, 4, 8}, 9), true, m, 1.0, /*eps=*/1e-2));
  }
}

TEST(GradCheckTest, RecomputeGivesIdenticalGradients) {
  auto grads = [](bool recompute) {
    ParameterRegistry reg(kCpu, 3);
    TransformerBlock layer(reg, "block", 8, 2, 1, 0.1f);
    layer.set_recompute(recompute);
    Context ctx(kCpu, true, 5);
    Tensor x = Random({2, 4, 8}, 9);
    Tensor y = layer.Forward(x, ctx);
    const size_t saved = ctx.num_saved();
    Tensor dx = layer.Backward(Random(y.shape(), 10), ctx);
    std::vector<float> all(dx.data_as<float>(), dx.data_as<float>() + dx.numel());
    for (auto& p : reg.params()) all.insert(all.end(), p->grad.data_as<float>(), p->grad.data_as<float>() + p->grad.numel());
    return std::make_pair(all, saved);
  };
  auto [plain, saved_plain] = grads(false);
  auto [recomputed, saved_recompute] = grads(true);
  EXPECT_EQ(plain, recomputed);
  EXPECT_EQ(saved_recompute, 1u);
  EXPECT_GT(saved_plain, 10u);
}

// Loss heads: finite differences of the scalar loss itself.
void CheckLoss(LossKind kind, const Tensor& input, const Tensor& target) {
  LossHead head(kind);
  Context ctx(kCpu, true, 0);
  head.Forward(input, target, ctx);
  Tensor grad = head.Backward(ctx);
  for (int64_t i = 0; i < input.numel(); ++i) {
    float* v = input.data_as<float>() + i;
    const float saved = *v;
    Context c(kCpu, true, 0);
    *v = saved + 1e-3f;
    const double lp = head.Forward(input, target, c);
    *v = saved - 1e-3f;
    const double lm = head.Forward(input, target, c);
    *v = saved;
    const double numeric = (lp - lm) / 2e-3;
    EXPECT_NEAR(grad.data_as<float>()[i], numeric, 1e-3 * std::max(1.0, std::abs(numeric)) + 2e-4)
        << "element " << i;
  }
}

TEST(GradCheckTest, LossHeads) {
  CheckLoss(LossKind::kMse, Random({3, 4}, 12), Random({3, 4}, 13));
  Tensor targets = ops::NewTensor(kCpu, {2, 3}, DType::kI32);
  for (int i = 0; i < 6; ++i) targets.data_as<int32_t>()[i] = (i * 5) % 7;
  CheckLoss(LossKind::kCrossEntropy, Random({2, 3, 7}, 14), targets);
  Tensor labels = ops::NewTensor(kCpu, {6});
  for (int i = 0; i < 6; ++i) labels.data_as<float>()[i] = i % 3 == 0;
  CheckLoss(LossKind::kBceWithLogits, Random({6}, 15, 2.0f), labels);
}

TEST(ParameterRegistryTest, SeededInitDependsOnNameOnly) {
  ParameterRegistry a(kCpu, 42), b(kCpu, 42), c(kCpu, 43);
  a.Create("x", {4}, InitSpec::Normal(1.0f));
  a.Create("w", {3, 3}, InitSpec::Normal(1.0f));
  b.Create("w", {3, 3}, InitSpec::Normal(1.0f));  // other creation order
  c.Create("w", {3, 3}, InitSpec::Normal(1.0f));
  const float* wa = a.Find("w")->value.data_as<float>();
  const float* wb = b.Find("w")->value.data_as<float>();
  const float* wc = c.Find("w")->value.data_as<float>();
  EXPECT_TRUE(std::equal(wa, wa + 9, wb));
  EXPECT_FALSE(std::equal(wa, wa + 9, wc));
  EXPECT_EQ(a.NumElements(), 13);
  EXPECT_EQ(a.params()[0]->name, "x");
}

}  // namespace
}  // namespace strata::nn
