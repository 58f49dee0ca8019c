// context_parallel_test.cc: ring attention (context parallelism).
//  - The blockwise ops: a rank's queries against every rank's key/value block, folded in ring
//    order, give causal attention's rows at that rank's positions, and the blocks' backward sums
//    give its dq, dk and dv (cp 1 to 4, the balanced causal split).
//  - Layers over cp ranks as threads joined by real Gloo communicators: an attention layer and a
//    transformer block with each rank holding its chunks of every sequence match the unsplit
//    layer (outputs and dL/dx at the rank's positions; parameter gradients summed over the
//    ranks), for the fused and the split backward, and pass a finite-difference check (the
//    probe loss summed over the ranks in float64).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/mesh.h"
#include "tests/trainer/inproc_trainers.h"
#include "tests/trainer/random_tensor.h"
#include "trainer/comm/gloo_communicator.h"
#include "trainer/nn/layers.h"
#include "trainer/ops/ops.h"
#include "trainer/ops/rng.h"

namespace strata::nn {
namespace {

const ops::Exec kCpu = ops::Exec::Cpu();

Tensor Random(Shape shape, uint64_t seed, float scale = 1.0f) {
  return testing::RandomTensor(std::move(shape), seed, scale);
}

// The entries of `t` at `index` along dimension `d`, in that order.
Tensor Take(const Tensor& t, int d, const std::vector<int64_t>& index) {
  Shape shape = t.shape();
  shape[static_cast<size_t>(d)] = static_cast<int64_t>(index.size());
  Tensor out = ops::NewTensor(kCpu, shape);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= t.size(i);
  for (int i = d + 1; i < t.dim(); ++i) inner *= t.size(i);
  float* dst = out.data_as<float>();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t p : index) {
      std::memcpy(dst, t.data_as<float>() + (o * t.size(d) + p) * inner, static_cast<size_t>(inner) * sizeof(float));
      dst += inner;
    }
  }
  return out;
}

Tensor Copy(const Tensor& t) {
  Tensor c = ops::NewTensor(kCpu, t.shape());
  std::memcpy(c.data(), t.data(), t.nbytes());
  return c;
}

double MaxRelDiff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data_as<float>()[i], y = b.data_as<float>()[i];
    worst = std::max(worst, std::abs(x - y) / std::max({std::abs(x), std::abs(y), 1e-2}));
  }
  return worst;
}

TEST(BlockAttentionTest, BlocksInRingOrderGiveCausalAttentionAndItsGradients) {
  const int64_t b = 2, h = 2, t = 24, hd = 8;
  Tensor q = Random({b, h, t, hd}, 1), k = Random({b, h, t, hd}, 2), v = Random({b, h, t, hd}, 3);
  Tensor att = ops::NewTensor(kCpu, {b, h, t, t}), out = ops::NewTensor(kCpu, q.shape());
  ops::CausalAttention(kCpu, q, k, v, att, out);
  Tensor dout = Random(q.shape(), 4);
  Tensor dq = ops::NewTensor(kCpu, q.shape()), dk = ops::NewTensor(kCpu, q.shape()), dv = ops::NewTensor(kCpu, q.shape());
  ops::CausalAttentionBackward(kCpu, q, k, v, att, dout, dq, dk, dv);
  for (int cp : {1, 2, 3, 4}) {
    std::vector<std::vector<int64_t>> pos;
    for (int r = 0; r < cp; ++r) pos.push_back(CausalBalancedPositions(t, cp, r));
    std::vector<Tensor> dk_sum, dv_sum;
    for (int r = 0; r < cp; ++r) {
      dk_sum.push_back(ops::NewZeros(kCpu, Take(k, 2, pos[r]).shape()));
      dv_sum.push_back(ops::NewZeros(kCpu, Take(k, 2, pos[r]).shape()));
    }
    for (int r = 0; r < cp; ++r) {
      Tensor qr = Take(q, 2, pos[r]);
      Tensor o = ops::NewTensor(kCpu, qr.shape()), lse = ops::NewTensor(kCpu, {b, h, qr.size(2)});
      ops::Fill(kCpu, o, 0.0f);
      ops::Fill(kCpu, lse, -INFINITY);
      for (int s = 0; s < cp; ++s) {
        const int src = (r - s + cp) % cp;
        ops::BlockAttention(kCpu, qr, Take(k, 2, pos[src]), Take(v, 2, pos[src]), pos[r], pos[src], o, lse);
      }
      EXPECT_LT(MaxRelDiff(o, Take(out, 2, pos[r])), 1e-5) << "out, cp " << cp << " rank " << r;
      Tensor dor = Take(dout, 2, pos[r]), delta = ops::NewTensor(kCpu, lse.shape());
      ops::AttentionDelta(kCpu, o, dor, delta);
      Tensor dqr = ops::NewZeros(kCpu, qr.shape());
      for (int s = 0; s < cp; ++s) {
        const int src = (r - s + cp) % cp;
        ops::BlockAttentionBackward(kCpu, qr, Take(k, 2, pos[src]), Take(v, 2, pos[src]), pos[r], pos[src], lse, dor,
                                    delta, dqr, dk_sum[src], dv_sum[src]);
      }
      EXPECT_LT(MaxRelDiff(dqr, Take(dq, 2, pos[r])), 1e-4) << "dq, cp " << cp << " rank " << r;
    }
    for (int r = 0; r < cp; ++r) {
      EXPECT_LT(MaxRelDiff(dk_sum[r], Take(dk, 2, pos[r])), 1e-4) << "dk, cp " << cp << " rank " << r;
      EXPECT_LT(MaxRelDiff(dv_sum[r], Take(dv, 2, pos[r])), 1e-4) << "dv, cp " << cp << " rank " << r;
    }
  }
}

TEST(BlockAttentionTest, AQueryWithNoVisibleKeyInABlockIsLeftAlone) {
  Tensor q = Random({1, 1, 2, 4}, 5), k = Random({1, 1, 2, 4}, 6), v = Random({1, 1, 2, 4}, 7);
  Tensor out = ops::NewTensor(kCpu, q.shape()), lse = ops::NewTensor(kCpu, {1, 1, 2});
  ops::Fill(kCpu, out, 0.0f);
  ops::Fill(kCpu, lse, -INFINITY);
  ops::BlockAttention(kCpu, q, k, v, {0, 1}, {5, 6}, out, lse);  // every key lies in the future
  for (int64_t i = 0; i < 2; ++i) EXPECT_EQ(lse.data_as<float>()[i], -INFINITY);
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_EQ(out.data_as<float>()[i], 0.0f);
}

class ContextParallelTest : public InprocTrainersTest {
 protected:
  void SetUp() override { StartTrainers(4); }

  // body(rank, group) on `cp` ranks at once, over a fresh communicator.
  void OnRanks(int cp, const std::function<void(int, CpGroup)>& body) {
    const std::string name = "cp/" + std::to_string(groups_++);
    std::vector<std::thread> threads;
    for (int r = 0; r < cp; ++r) {
      threads.emplace_back([&, r] {
        auto comm = MakeGlooCommunicator(*nodes_[r], name, r, cp);
        ASSERT_TRUE(comm.ok()) << comm.status().ToString();
        body(r, CpGroup{comm->get()});
      });
    }
    for (auto& t : threads) t.join();
  }

  using Make = std::function<std::unique_ptr<Layer>(ParameterRegistry&, CpGroup)>;
  void Check(int cp, const Make& make, bool finite_differences);

  int groups_ = 0;
};

// Sums every parameter's gradient over the group (the trainer's all-reduce over dp x cp does
// this, averaged, for the model's loss).
void SumGrads(ParameterRegistry& reg, const CpGroup& cp) {
  for (auto& p : reg.params()) {
    ASSERT_TRUE(cp.comm->AllReduce(p->grad.data_as<float>(), static_cast<size_t>(p->grad.numel()), ReduceOp::kSum).ok());
  }
}

void ContextParallelTest::Check(int cp, const Make& make, bool finite_differences) {
  const int64_t n = 2, t = 8 * cp, c = 16;
  Tensor x_whole = Random({n, t, c}, 21);
  ParameterRegistry whole_reg(kCpu, 5);
  std::unique_ptr<Layer> whole = make(whole_reg, {});
  Context wctx(kCpu, true, 7);
  Tensor y_whole = whole->Forward(x_whole, wctx);
  Tensor r = Random(y_whole.shape(), 99);
  Tensor dx_whole = whole->Backward(r, wctx);

  OnRanks(cp, [&](int rank, CpGroup group) {
    ParameterRegistry reg(kCpu, 5);
    std::unique_ptr<Layer> layer = make(reg, group);
    const std::vector<int64_t> pos = CausalBalancedPositions(t, cp, rank);
    Tensor x = Take(x_whole, 1, pos), r_local = Take(r, 1, pos);
    // Forward (its output in *y), then the fused backward or I then W; gradients summed over
    // the ranks. Returns dL/dx.
    auto backprop = [&](bool split, Tensor* y) {
      reg.ZeroGrad();
      Context ctx(kCpu, true, 7);
      Tensor out = layer->Forward(x, ctx);
      if (y) *y = out;
      Tensor dx;
      if (split) {
        dx = Copy(layer->BackwardInput(r_local, ctx));
        layer->BackwardWeight(ctx);
      } else {
        dx = layer->Backward(r_local, ctx);
      }
      SumGrads(reg, group);
      return dx;
    };
    for (bool split : {false, true}) {
      const std::string mode = split ? "split backward" : "fused backward";
      Tensor y;
      Tensor dx = backprop(split, &y);
      EXPECT_LT(MaxRelDiff(y, Take(y_whole, 1, pos)), 1e-4) << "output, cp " << cp << " rank " << rank;
      EXPECT_LT(MaxRelDiff(dx, Take(dx_whole, 1, pos)), 1e-4) << "dx, " << mode << ", rank " << rank;
      // 3e-4: the keys' bias gradient is 0 in exact arithmetic (softmax ignores a per-row shift),
      // so in floats it is pure cancellation, compared against the 1e-2 floor.
      for (auto& p : reg.params()) {
        EXPECT_LT(MaxRelDiff(p->grad, whole_reg.Find(p->name)->grad), 3e-4) << p->name << ", " << mode;
      }
    }
    if (!finite_differences) return;
    // L = sum over ranks of sum(y_local * r_local). Parameters are whole on every rank (each
    // probe perturbs them everywhere); x is split (its owner perturbs its coordinate).
    auto loss = [&] {
      Context ctx(kCpu, true, 7);
      Tensor y = layer->Forward(x, ctx);
      double l = 0;
      for (int64_t i = 0; i < y.numel(); ++i) l += static_cast<double>(y.data_as<float>()[i]) * r_local.data_as<float>()[i];
      EXPECT_TRUE(group.comm->AllReduceHost(&l, 1, ReduceOp::kSum).ok());
      return l;
    };
    for (bool split : {false, true}) {
      Tensor dx = backprop(split, nullptr);
      struct Target { std::string name; Tensor value, grad; bool everywhere; };
      std::vector<Target> targets = {{"input", x, dx, false}};
      for (auto& p : reg.params()) targets.push_back({p->name, p->value, p->grad, true});
      rng::Stream pick(123);  // the same stream on every rank
      const double eps = 1e-2;  // the loss sums every output in float: a smaller step is rounding noise
      double worst = 0;
      std::string where;
      for (int owner = 0; owner < cp; ++owner) {
        for (Target& tg : targets) {
          if (tg.everywhere && owner > 0) continue;
          for (int k = 0; k < 6; ++k) {
            const int64_t idx = static_cast<int64_t>(pick.Next() % tg.value.numel());
            const bool mine = tg.everywhere || owner == rank;
            float* v = tg.value.data_as<float>() + idx;
            const float saved = *v;
            if (mine) *v = saved + static_cast<float>(eps);
            const double lp = loss();
            if (mine) *v = saved - static_cast<float>(eps);
            const double lm = loss();
            *v = saved;
            if (!mine) continue;
            const double numeric = (lp - lm) / (2 * eps), analytic = tg.grad.data_as<float>()[idx];
            const double err = std::abs(analytic - numeric) / std::max({std::abs(analytic), std::abs(numeric), 0.05});
            if (err > worst) {
              worst = err;
              where = tg.name + "[" + std::to_string(idx) + "] analytic " + std::to_string(analytic) + " numeric " +
                      std::to_string(numeric);
            }
          }
        }
      }
      EXPECT_LT(worst, 1e-2) << (split ? "split" : "fused") << " backward, rank " << rank << ": " << where;
    }
  });
}

TEST_F(ContextParallelTest, AttentionOverTwoRanksMatchesTheWholeLayerAndFiniteDifferences) {
  Check(2, [](ParameterRegistry& reg, CpGroup cp) {
    return std::make_unique<CausalSelfAttention>(reg, "attn", 16, 2, 0.3f, 0.3f, TpGroup{}, cp);
  }, /*finite_differences=*/true);
}

TEST_F(ContextParallelTest, TransformerBlockOverFourRanksMatchesTheWholeBlock) {
  Check(4, [](ParameterRegistry& reg, CpGroup cp) {
    return std::make_unique<TransformerBlock>(reg, "block", 16, 2, 2, 0.0f, TpGroup{}, cp);
  }, /*finite_differences=*/false);
}

TEST_F(ContextParallelTest, TransformerBlockOverThreeRanksPassesFiniteDifferences) {
  Check(3, [](ParameterRegistry& reg, CpGroup cp) {
    return std::make_unique<TransformerBlock>(reg, "block", 16, 2, 2, 0.0f, TpGroup{}, cp);
  }, /*finite_differences=*/true);
}

}  // namespace
}  // namespace strata::nn
