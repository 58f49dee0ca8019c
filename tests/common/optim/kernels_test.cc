// kernels_test.cc: every optimizer kernel on every instruction-set path this CPU has, against
// the double-precision reference (each step from the same state, so the bound stays tight) and
// bit for bit against the scalar path; bias correction at early and late steps, weight decay in
// both forms, lengths that leave tails, the bf16 copy, threads, and the aliasing check.
#include "common/optim/kernels.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/optim/internal.h"
#include "common/optim/reference.h"
#include "common/thread_pool.h"

namespace strata::optim {
namespace {

constexpr Isa kPaths[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};
constexpr int64_t kLengths[] = {1, 7, 8, 15, 16, 17, 31, 33, 100, 1001};

struct Case {
  std::string name;
  bool adam;
  AdamHyper a;
  SgdHyper s;
  bool momentum = true;  // SGD: keep a momentum buffer
};

std::vector<Case> Cases() {
  std::vector<Case> c;
  AdamHyper a;
  a.lr = 0.01f;
  c.push_back({"adam", true, a, {}});
  a.l2 = 0.1f;
  c.push_back({"adam_l2", true, a, {}});
  a.l2 = 0;
  a.decoupled = 0.1f;
  c.push_back({"adamw", true, a, {}});
  a.grad_scale = 0.25f;
  a.beta2 = 0.95f;
  c.push_back({"adamw_scaled_beta2_095", true, a, {}});
  SgdHyper s;
  s.lr = 0.05f;
  c.push_back({"sgd_plain", false, {}, s, false});
  s.momentum = 0.9f;
  c.push_back({"sgd_momentum", false, {}, s});
  s.weight_decay = 0.01f;
  c.push_back({"sgd_momentum_wd", false, {}, s});
  s.nesterov = true;
  s.grad_scale = 0.5f;
  c.push_back({"sgd_nesterov_scaled", false, {}, s});
  s = {};
  s.lr = 0.05f;
  s.weight_decay = 0.01f;
  c.push_back({"sgd_plain_wd", false, {}, s, false});
  return c;
}

struct State {
  std::vector<float> w, m, v;
  std::vector<uint16_t> bf16;
};

State RandomState(int64_t n, bool adam, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  State s;
  s.w.resize(n);
  s.m.resize(n);
  s.v.resize(n);
  s.bf16.assign(n, 0);
  for (int64_t i = 0; i < n; ++i) {
    s.w[i] = normal(rng);
    s.m[i] = 0.1f * normal(rng);
    s.v[i] = adam ? 0.01f * std::abs(normal(rng)) : 0.0f;
  }
  return s;
}

void Step(const Case& c, State& s, const std::vector<float>& g, int64_t step, bool bf16,
          const KernelOptions& o, bool reference) {
  uint16_t* b = bf16 ? s.bf16.data() : nullptr;
  const int64_t n = static_cast<int64_t>(s.w.size());
  if (c.adam) {
    AdamHyper h = c.a;
    h.step = step;
    const AdamArrays arr{s.w.data(), s.m.data(), s.v.data(), g.data(), b, n};
    reference ? AdamReference(h, arr) : AdamStep(h, arr, o);
  } else {
    const SgdArrays arr{s.w.data(), c.momentum ? s.m.data() : nullptr, g.data(), b, n};
    reference ? SgdReference(c.s, arr) : SgdStep(c.s, arr, o);
  }
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class KernelTest : public ::testing::TestWithParam<std::tuple<Case, Isa>> {
 protected:
  void SetUp() override {
    if (!IsaSupported(std::get<1>(GetParam()))) GTEST_SKIP() << "CPU lacks this path";
  }
};

// Bounds on one step's float rounding: the formula evaluated on absolute values (what a sum
// with cancellation is relative to), times 1e-6 (~8 roundings of 2^-24).
struct Bounds {
  double w, m, v;
};
Bounds StepBounds(const Case& c, const State& before, const std::vector<float>& grad, int64_t i,
                  int64_t step) {
  const double w = std::abs(before.w[i]), m0 = std::abs(before.m[i]), v0 = before.v[i];
  const double gr = std::abs(grad[i]);
  constexpr double k = 1e-6;
  if (c.adam) {
    const AdamHyper& h = c.a;
    const double g = gr * h.grad_scale + h.l2 * w;
    const double m = h.beta1 * m0 + (1 - h.beta1) * g;
    const double v = h.beta2 * v0 + (1 - h.beta2) * g * g;
    const double c1 = 1 / (1 - std::pow(double{h.beta1}, step));
    const double c2 = 1 / (1 - std::pow(double{h.beta2}, step));
    const double den = std::sqrt(v * c2) + h.eps;  // v >= 0: no cancellation here
    // The kernels' bias corrections are the trainer's float factors, 1 / (1 - float(beta^t)):
    // the subtraction in float costs up to 2^-24 beta^t / (1 - beta^t) of each (BiasCorrection).
    const double p1 = std::pow(double{h.beta1}, step), p2 = std::pow(double{h.beta2}, step);
    const double c_err = 1.2e-7 * (p1 / (1 - p1) + 0.5 * p2 / (1 - p2));
    const double update = m * c1 / den;
    return {k * (w + h.lr * (update + h.decoupled * w)) + h.lr * update * c_err, k * m + 1e-30,
            k * v + 1e-30};
  }
  const SgdHyper& h = c.s;
  const double g = gr * h.grad_scale + h.weight_decay * w;
  const double m = c.momentum ? h.momentum * m0 + g : 0.0;
  const double u = !c.momentum ? g : (h.nesterov ? g + h.momentum * m : m);
  return {k * (w + h.lr * u), k * m + 1e-30, 0.0};
}

// Each step starts the reference from the kernel's state, so the bound is one step's rounding
// (StepBounds), far below any formula slip (a bias correction off by one step, say).
TEST_P(KernelTest, MatchesReferenceEachStep) {
  const auto& [c, isa] = GetParam();
  for (int64_t n : kLengths) {
    State s = RandomState(n, c.adam, static_cast<uint32_t>(n));
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> g(n);
    // Steps 1..6, then late ones where the bias corrections are near 1.
    for (int64_t step : {1, 2, 3, 4, 5, 6, 100, 1000, 100000}) {
      for (float& x : g) x = normal(rng);
      const State before = s;
      State ref = s;
      Step(c, s, g, step, true, {.isa = isa}, false);
      Step(c, ref, g, step, true, {}, true);
      for (int64_t i = 0; i < n; ++i) {
        const Bounds b = StepBounds(c, before, g, i, step);
        ASSERT_NEAR(s.w[i], ref.w[i], b.w)
            << c.name << " " << IsaName(isa) << " n " << n << " step " << step << " w[" << i << "]";
        ASSERT_NEAR(s.m[i], ref.m[i], b.m) << c.name << " step " << step << " m[" << i << "]";
        ASSERT_NEAR(s.v[i], ref.v[i], b.v) << c.name << " step " << step << " v[" << i << "]";
        ASSERT_EQ(s.bf16[i], FloatToBF16(s.w[i])) << c.name << " bf16[" << i << "]";
      }
    }
  }
}

// Every path gives the scalar path's bits, over a trajectory of 20 steps.
TEST_P(KernelTest, SameBitsAsScalarPath) {
  const auto& [c, isa] = GetParam();
  for (int64_t n : kLengths) {
    State fast = RandomState(n, c.adam, 11), scalar = fast;
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> g(n);
    for (int64_t step = 1; step <= 20; ++step) {
      for (float& x : g) x = normal(rng);
      Step(c, fast, g, step, step % 2 == 0, {.isa = isa}, false);
      Step(c, scalar, g, step, step % 2 == 0, {.isa = Isa::kScalar}, false);
    }
    EXPECT_TRUE(SameBits(fast.w, scalar.w)) << c.name << " n " << n;
    EXPECT_TRUE(SameBits(fast.m, scalar.m)) << c.name << " n " << n;
    EXPECT_TRUE(SameBits(fast.v, scalar.v)) << c.name << " n " << n;
    EXPECT_EQ(fast.bf16, scalar.bf16) << c.name << " n " << n;
  }
}

// Chunks on a pool give the bits of one pass on the calling thread.
TEST_P(KernelTest, ThreadsGiveTheSameBits) {
  const auto& [c, isa] = GetParam();
  ThreadPool pool(3);
  const int64_t n = 5003;
  State pooled = RandomState(n, c.adam, 2), alone = pooled;
  std::vector<float> g(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t step = 1; step <= 3; ++step) {
    for (float& x : g) x = normal(rng);
    Step(c, pooled, g, step, true, {.isa = isa, .pool = &pool, .grain = 100}, false);
    Step(c, alone, g, step, true, {.isa = isa}, false);
  }
  EXPECT_TRUE(SameBits(pooled.w, alone.w));
  EXPECT_TRUE(SameBits(pooled.m, alone.m));
  EXPECT_TRUE(SameBits(pooled.v, alone.v));
  EXPECT_EQ(pooled.bf16, alone.bf16);
}

INSTANTIATE_TEST_SUITE_P(
    All, KernelTest, ::testing::Combine(::testing::ValuesIn(Cases()), ::testing::ValuesIn(kPaths)),
    [](const auto& info) {
      return std::get<0>(info.param).name + "_" + std::string(IsaName(std::get<1>(info.param)));
    });

// Hand-computed first steps: the formulas themselves, not only kernel against reference.
TEST(OptimKernels, AdamFirstStepIsLrTimesSign) {
  // At step 1 from m = v = 0: mhat = g, vhat = g^2, so w moves by lr * g / (|g| + eps).
  std::vector<float> w = {1.0f, -2.0f}, m(2, 0.0f), v(2, 0.0f), g = {0.5f, -4.0f};
  AdamStep({.lr = 0.1f, .eps = 0.0f}, {w.data(), m.data(), v.data(), g.data(), nullptr, 2});
  EXPECT_FLOAT_EQ(w[0], 0.9f);
  EXPECT_FLOAT_EQ(w[1], -1.9f);
  EXPECT_FLOAT_EQ(m[0], 0.05f);
  EXPECT_FLOAT_EQ(v[1], (1.0f - 0.999f) * 16.0f);
}

TEST(OptimKernels, WeightDecayForms) {
  // No gradient and fresh moments: AdamW decays w by lr * wd * w and nothing else; Adam's L2
  // decay becomes a gradient wd * w, normalised to a step of lr * sign(w).
  std::vector<float> w = {2.0f}, m = {0.0f}, v = {0.0f}, g = {0.0f};
  AdamStep({.lr = 0.1f, .decoupled = 0.5f}, {w.data(), m.data(), v.data(), g.data(), nullptr, 1});
  EXPECT_FLOAT_EQ(w[0], 2.0f - 0.1f * 0.5f * 2.0f);
  EXPECT_EQ(m[0], 0.0f);
  w = {2.0f};
  AdamStep({.lr = 0.1f, .eps = 0.0f, .l2 = 0.5f},
           {w.data(), m.data(), v.data(), g.data(), nullptr, 1});
  EXPECT_FLOAT_EQ(w[0], 1.9f);
  EXPECT_FLOAT_EQ(m[0], 0.1f * 0.5f * 2.0f);
}

TEST(OptimKernels, BiasCorrectionIsTheTrainersFloatFactor) {
  EXPECT_EQ(BiasCorrection(0.9f, 1), 1.0f / (1.0f - 0.9f));
  EXPECT_EQ(BiasCorrection(0.999f, 10),
            1.0f / (1.0f - static_cast<float>(std::pow(static_cast<double>(0.999f), 10.0))));
  EXPECT_EQ(BiasCorrection(0.9f, 100000), 1.0f);
}

TEST(OptimKernels, SgdMomentumAndNesterov) {
  std::vector<float> w = {1.0f}, m = {1.0f}, g = {2.0f};
  SgdStep({.lr = 0.5f, .momentum = 0.5f}, {w.data(), m.data(), g.data(), nullptr, 1});
  EXPECT_FLOAT_EQ(m[0], 2.5f);          // 0.5 * 1 + 2
  EXPECT_FLOAT_EQ(w[0], 1.0f - 1.25f);  // lr * m
  w = {1.0f};
  m = {1.0f};
  SgdStep({.lr = 0.5f, .momentum = 0.5f, .nesterov = true},
          {w.data(), m.data(), g.data(), nullptr, 1});
  EXPECT_FLOAT_EQ(w[0], 1.0f - 0.5f * (2.0f + 0.5f * 2.5f));
}

// The vector bf16 conversions agree with FloatToBF16 on ties, overflow, subnormals, infinities
// and NaNs whose payload lies only in the dropped half.
TEST(OptimKernels, Bf16ConversionsMatchTheHostOne) {
  std::vector<uint32_t> bits = {0x00000000, 0x80000000, 0x3F808000, 0x3F818000, 0x3F80C000,
                                0x3F807FFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000,
                                0x7F800001, 0xFF800001, 0x7FC00000, 0x7F810000, 0x7FFFFFFF,
                                0x00000001, 0x807FFFFF, 0x00008000, 0x00018000};
  std::mt19937 rng(9);
  while (bits.size() < 1000) bits.push_back(static_cast<uint32_t>(rng()));
  std::vector<float> src(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) src[i] = std::bit_cast<float>(bits[i]);
  std::vector<uint16_t> expect(src.size());
  ConvertF32ToBF16(src.data(), expect.data(), src.size());
  const int64_t n = static_cast<int64_t>(src.size());
  if (IsaSupported(Isa::kAvx2)) {
    std::vector<uint16_t> got(src.size());
    internal::ToBF16Avx2(src.data(), got.data(), n);
    EXPECT_EQ(got, expect);
  }
  if (IsaSupported(Isa::kAvx512)) {
    std::vector<uint16_t> got(src.size());
    internal::ToBF16Avx512(src.data(), got.data(), n);
    EXPECT_EQ(got, expect);
  }
}

TEST(OptimKernels, BestIsaIsSupported) {
  EXPECT_TRUE(IsaSupported(BestIsa()));
  EXPECT_NE(BestIsa(), Isa::kBest);
}

TEST(OptimKernelsDeathTest, OverlappingArraysAbort) {
  std::vector<float> buf(64, 0.0f), g(32, 0.0f);
  EXPECT_DEATH(AdamStep({}, {buf.data(), buf.data() + 16, buf.data() + 48, g.data(), nullptr, 32}),
               "overlap");
  EXPECT_DEATH(SgdStep({}, {buf.data(), nullptr, buf.data() + 8, nullptr, 16}), "overlap");
}

}  // namespace
}  // namespace strata::optim
