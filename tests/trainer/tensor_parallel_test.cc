// tensor_parallel_test.cc: every tensor-parallel layer at tp = 2, its ranks as threads joined by
// real Gloo communicators (InprocTrainersTest):
//  - equivalence with the unsplit layer built from the same seed: each shard starts as its slice
//    of the whole parameter (bit for bit), the outputs and dL/dx match, and each shard's
//    gradient matches its slice of the whole gradient, for the fused and the split backward;
//  - a gradient check (fused backward, and I then W) against central finite differences of the split layer, the
//    probe loss summed over the ranks in float64, the ranks perturbing in lockstep;
//  - the vocab-parallel cross-entropy against the unsplit one, and its own finite differences.
#include "trainer/nn/tensor_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/trainer/inproc_trainers.h"
#include "tests/trainer/random_tensor.h"
#include "trainer/comm/gloo_communicator.h"
#include "trainer/nn/loss.h"
#include "trainer/ops/ops.h"
#include "trainer/ops/rng.h"

namespace strata::nn {
namespace {

constexpr int kTp = 2;
// A split layer sums in another order than the whole one (a row-parallel product is two partial
// sums, all-reduced): float rounding, relative to max(|x|, 1e-2).
constexpr double kRounding = 1e-4;
const ops::Exec kCpu = ops::Exec::Cpu();

Tensor Random(Shape shape, uint64_t seed, float scale = 1.0f) {
  return testing::RandomTensor(std::move(shape), seed, scale);
}

// Element i of a shard of `whole` laid out as `spec`.
Tensor Slice(const Tensor& whole, const ShardSpec& spec) {
  Tensor out = ops::NewTensor(kCpu, spec.LocalShape(), whole.dtype());
  const size_t es = DTypeSize(whole.dtype());
  for (int64_t i = 0; i < out.numel(); ++i) {
    std::memcpy(static_cast<char*>(out.data()) + i * es,
                static_cast<const char*>(whole.data()) + spec.GlobalIndex(i) * es, es);
  }
  return out;
}

// The split of a tensor's last axis (the rank's columns), of its sequence (axis 1) when
// `sequence`, or none (whole on every rank).
ShardSpec SplitOf(const Shape& shape, int rank, bool split, bool sequence, int blocks = 1) {
  if (sequence) return {shape, 1, 1, rank, kTp};
  if (!split) return ShardSpec::Whole(shape);
  return {shape, static_cast<int>(shape.size()) - 1, blocks, rank, kTp};
}

// What the trainer does once gradients are final: sums those that sequence parallelism left
// partial over the group.
void SumSequencePartials(ParameterRegistry& reg, const TpGroup& tp) {
  for (auto& p : reg.params()) {
    if (p->sequence_partial) TpAllReduce(tp, p->grad, ReduceOp::kSum, p->name);
  }
}

// Adds the same noise to every parameter of a whole layer and to its shards (noise of the
// unsplit shape, sliced), so that every path of the layer matters in the checks.
void Perturb(ParameterRegistry& reg, float scale) {
  for (auto& p : reg.params()) {
    Tensor noise = Random(p->shard.global, rng::Derive(11, p->name.c_str()), scale);
    ops::Axpy(kCpu, 1.0f, Slice(noise, p->shard), p->value);
  }
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

struct LayerCase {
  std::function<std::unique_ptr<Layer>(ParameterRegistry&, TpGroup)> make;
  Tensor x;              // the unsplit input
  bool x_split = false;  // each rank takes a slice of x's last axis (a row-parallel layer)
  bool x_grad = true;    // x is differentiable (not token ids)
  bool y_split = false;  // each rank's output is a slice of the last axis
  int y_blocks = 1;
  double eps = 1e-3;
  bool sequence = false;  // sequence-parallel: x and y are each rank's slice of axis 1
};

class TensorParallelTest : public InprocTrainersTest {
 protected:
  void SetUp() override { StartTrainers(kTp); }

  // body(rank, group) on every rank at once, over a fresh communicator.
  void OnRanks(const std::function<void(int, TpGroup)>& body) {
    const std::string name = "tp/" + std::to_string(groups_++);
    std::vector<std::thread> threads;
    for (int r = 0; r < kTp; ++r) {
      threads.emplace_back([&, r] {
        auto comm = MakeGlooCommunicator(*nodes_[r], name, r, kTp);
        ASSERT_TRUE(comm.ok()) << comm.status().ToString();
        body(r, TpGroup{comm->get()});
      });
    }
    for (auto& t : threads) t.join();
  }

  void Check(const LayerCase& c);

  int groups_ = 0;
};

void TensorParallelTest::Check(const LayerCase& c) {
  // The unsplit layer: output, dL/dx and gradients for L = sum(y * r).
  ParameterRegistry whole_reg(kCpu, 5);
  std::unique_ptr<Layer> whole = c.make(whole_reg, {});
  Perturb(whole_reg, 0.1f);
  Context wctx(kCpu, true, 7);
  Tensor y_whole = whole->Forward(c.x, wctx);
  Tensor r = Random(y_whole.shape(), 99);
  Tensor dx_whole = whole->Backward(r, wctx);

  OnRanks([&](int rank, TpGroup tp) {
    ParameterRegistry reg(kCpu, 5);
    std::unique_ptr<Layer> layer = c.make(reg, tp);
    Perturb(reg, 0.1f);
    const ShardSpec xs = SplitOf(c.x.shape(), rank, c.x_split, c.sequence && c.x_grad),
                    ys = SplitOf(y_whole.shape(), rank, c.y_split, c.sequence, c.y_blocks);
    Tensor x = Slice(c.x, xs), r_local = Slice(r, ys);
    for (auto& p : reg.params()) {  // exactly its slice of the whole parameter
      Parameter* w = whole_reg.Find(p->name);
      ASSERT_NE(w, nullptr) << p->name;
      EXPECT_EQ(MaxRelDiff(Slice(w->value, p->shard), p->value), 0.0) << p->name;
    }
    for (bool split : {false, true}) {
      const std::string mode = split ? "split backward" : "fused backward";
      reg.ZeroGrad();
      Context ctx(kCpu, true, 7);
      Tensor y = layer->Forward(x, ctx);
      EXPECT_LT(MaxRelDiff(y, Slice(y_whole, ys)), kRounding) << "output, rank " << rank;
      Tensor dx;
      if (split) {
        dx = layer->BackwardInput(r_local, ctx);
        if (dx.defined()) dx = Slice(dx, ShardSpec::Whole(dx.shape()));  // a copy: the weight half follows
        layer->BackwardWeight(ctx);
      } else {
        dx = layer->Backward(r_local, ctx);
      }
      SumSequencePartials(reg, tp);
      if (c.x_grad) {
        EXPECT_LT(MaxRelDiff(dx, Slice(dx_whole, xs)), kRounding) << "dx, " << mode << ", rank " << rank;
      }
      for (auto& p : reg.params()) {
        EXPECT_LT(MaxRelDiff(p->grad, Slice(whole_reg.Find(p->name)->grad, p->shard)), kRounding)
            << p->name << " (" << p->shard.ToString() << "), " << mode;
      }
    }

    // Finite differences of the split layer: L = sum over ranks of sum(y_local * r_local) (an
    // output whole on every rank counts once). Every rank walks the same probes; the rank that
    // owns a probed coordinate perturbs it (x, whole on every rank, is perturbed everywhere).
    auto loss = [&] {
      Context ctx(kCpu, true, 7);
      Tensor y = layer->Forward(x, ctx);
      double l = 0;
      for (int64_t i = 0; i < y.numel(); ++i) l += static_cast<double>(y.data_as<float>()[i]) * r_local.data_as<float>()[i];
      if (c.y_split || c.sequence) {
        EXPECT_TRUE(tp.comm->AllReduceHost(&l, 1, ReduceOp::kSum).ok());
      }
      return l;
    };
    for (bool split : {false, true}) {  // the analytic gradients of each backward: fused, I then W
      reg.ZeroGrad();
      Context ctx(kCpu, true, 7);
      layer->Forward(x, ctx);
      Tensor dx;
      if (split) {
        dx = layer->BackwardInput(r_local, ctx);
        if (dx.defined()) dx = Slice(dx, ShardSpec::Whole(dx.shape()));
        layer->BackwardWeight(ctx);
      } else {
        dx = layer->Backward(r_local, ctx);
      }
      SumSequencePartials(reg, tp);
      struct Target { std::string name; Tensor value, grad; bool everywhere; };
      std::vector<Target> targets;
      if (c.x_grad) targets.push_back({"input", x, dx, !c.x_split && !c.sequence});
      for (auto& p : reg.params()) targets.push_back({p->name, p->value, p->grad, p->shard.whole()});
      rng::Stream pick(123);  // the same stream on every rank
      double worst = 0;
      std::string where;
      for (int owner = 0; owner < kTp; ++owner) {
        for (Target& t : targets) {
          if (t.everywhere && owner > 0) continue;
          for (int k = 0; k < 6; ++k) {
            const int64_t idx = static_cast<int64_t>(pick.Next() % t.value.numel());
            const bool mine = t.everywhere || owner == rank;
            float* v = t.value.data_as<float>() + idx;
            const float saved = *v;
            if (mine) *v = saved + static_cast<float>(c.eps);
            const double lp = loss();
            if (mine) *v = saved - static_cast<float>(c.eps);
            const double lm = loss();
            *v = saved;
            if (!mine) continue;
            const double numeric = (lp - lm) / (2 * c.eps), analytic = t.grad.data_as<float>()[idx];
            const double err = std::abs(analytic - numeric) / std::max({std::abs(analytic), std::abs(numeric), 0.05});
            if (err > worst) {
              worst = err;
              where = t.name + "[" + std::to_string(idx) + "] analytic " + std::to_string(analytic) + " numeric " + std::to_string(numeric);
            }
          }
        }
      }
      EXPECT_LT(worst, 1e-2) << (split ? "split" : "fused") << " backward, rank " << rank << ": " << where;
    }
  });
}

TEST_F(TensorParallelTest, ColumnParallelLinear) {
  Check({[](ParameterRegistry& reg, TpGroup tp) -> std::unique_ptr<Layer> {
           return std::make_unique<ColumnParallelLinear>(reg, "fc", 6, 8, tp);
         },
         Random({2, 3, 6}, 2), false, true, true});
}

TEST_F(TensorParallelTest, ColumnParallelLinearInBlocks) {  // qkv: q, k and v each split
  Check({[](ParameterRegistry& reg, TpGroup tp) -> std::unique_ptr<Layer> {
           return std::make_unique<ColumnParallelLinear>(reg, "qkv", 4, 12, tp, true, -1.0f, 3);
         },
         Random({5, 4}, 3), false, true, true, 3});
}

TEST_F(TensorParallelTest, RowParallelLinear) {
  Check({[](ParameterRegistry& reg, TpGroup tp) -> std::unique_ptr<Layer> {
           return std::make_unique<RowParallelLinear>(reg, "fc", 8, 5, tp);
         },
         Random({4, 8}, 4), true, true, false});
}

TEST_F(TensorParallelTest, ColumnThenRowMlp) {
  Check({[](ParameterRegistry& reg, TpGroup tp) -> std::unique_ptr<Layer> {
           return MakeMlp(reg, "mlp", 5, 12, 3, ActivationKind::kGelu, 0.0f, -1.0f, tp);
         },
         Random({4, 5}, 7)});
}

TEST_F(TensorParallelTest, AttentionSplitByHeads) {
  Check({[](ParameterRegistry& reg, TpGroup tp) -> std::unique_ptr<Layer> {
           return std::make_unique<CausalSelfAttention>(reg, "attn", 8, 4, 0.3f, 0.3f, tp);
         },
         Random({2, 5, 8}, 8)});
}

TEST_F(TensorParallelTest, TransformerBlock) {
  LayerCase c{[](ParameterRegistry& reg, TpGroup tp) -> std::unique_ptr<Layer> {
                return std::make_unique<TransformerBlock>(reg, "block", 8, 2, 1, 0.1f, tp);
              },
              Random({2, 4, 8}, 9)};
  c.eps = 1e-2;  // as the unsplit block's check (gradcheck_test.cc): f32 rounding vs truncation
  Check(c);
}

TEST_F(TensorParallelTest, VocabParallelEmbedding) {
  Tensor ids = ops::NewTensor(kCpu, {2, 4}, DType::kI32);
  const int32_t raw[] = {1, 9, 1, 0, 3, 6, 8, 4};  // rows of both halves, one repeated
  for (int i = 0; i < 8; ++i) ids.data_as<int32_t>()[i] = raw[i];
  LayerCase c{[](ParameterRegistry& reg, TpGroup tp) -> std::unique_ptr<Layer> {
                if (!tp.split()) return std::make_unique<Embedding>(reg, "emb", 10, 4, 1.0f);
                return std::make_unique<VocabParallelEmbedding>(reg, "emb", 10, 4, tp, 1.0f);
              },
              ids};
  c.x_grad = false;
  Check(c);
}

// Sequence parallelism: the layers take and give each rank's slice of the sequence; norms'
// gradients are partial until summed over the group (SumSequencePartials, as the trainer does).
TEST_F(TensorParallelTest, SequenceParallelMlp) {
  LayerCase c{[](ParameterRegistry& reg, TpGroup tp) -> std::unique_ptr<Layer> {
                tp.sequence = true;
                return MakeMlp(reg, "mlp", 6, 16, 6, ActivationKind::kGelu, 0.0f, -1.0f, tp);
              },
              Random({2, 4, 6}, 7)};
  c.sequence = true;
  Check(c);
}

TEST_F(TensorParallelTest, SequenceParallelTransformerBlock) {
  LayerCase c{[](ParameterRegistry& reg, TpGroup tp) -> std::unique_ptr<Layer> {
                tp.sequence = true;
                return std::make_unique<TransformerBlock>(reg, "block", 8, 2, 1, 0.0f, tp);
              },
              Random({2, 4, 8}, 9)};
  c.sequence = true;
  c.eps = 1e-2;
  Check(c);
}

TEST_F(TensorParallelTest, SequenceParallelVocabEmbedding) {
  Tensor ids = ops::NewTensor(kCpu, {2, 4}, DType::kI32);
  const int32_t raw[] = {1, 9, 1, 0, 3, 6, 8, 4};
  for (int i = 0; i < 8; ++i) ids.data_as<int32_t>()[i] = raw[i];
  LayerCase c{[](ParameterRegistry& reg, TpGroup tp) -> std::unique_ptr<Layer> {
                if (!tp.split()) return std::make_unique<Embedding>(reg, "emb", 10, 4, 1.0f);
                tp.sequence = true;
                return std::make_unique<VocabParallelEmbedding>(reg, "emb", 10, 4, tp, 1.0f);
              },
              ids};
  c.x_grad = false;
  c.sequence = true;
  Check(c);
}

// The vocab-parallel loss against the unsplit one (value and gradient), and its gradient
// against finite differences of the loss in each rank's slice of the logits.
TEST_F(TensorParallelTest, VocabParallelCrossEntropy) {
  const int64_t rows = 6, vocab = 10;
  Tensor logits = Random({rows, vocab}, 21, 2.0f);
  Tensor targets = ops::NewTensor(kCpu, {rows}, DType::kI32);
  const int32_t raw[] = {0, 9, 4, -1, 5, 7};  // both halves, and an ignored row
  for (int i = 0; i < rows; ++i) targets.data_as<int32_t>()[i] = raw[i];
  LossHead whole(LossKind::kCrossEntropy);
  Context wctx(kCpu, true, 1);
  const double want = whole.Forward(logits, targets, wctx, 0.5f);
  Tensor grad_whole = whole.Backward(wctx);

  OnRanks([&](int rank, TpGroup tp) {
    LossHead head(LossKind::kCrossEntropy, tp);
    const ShardSpec cols = SplitOf(logits.shape(), rank, true, false);
    Tensor mine = Slice(logits, cols);
    Context ctx(kCpu, true, 1);
    const double got = head.Forward(mine, targets, ctx, 0.5f);
    EXPECT_NEAR(got, want, 1e-6 * std::abs(want)) << "rank " << rank;
    Tensor grad = head.Backward(ctx);
    EXPECT_LT(MaxRelDiff(grad, Slice(grad_whole, cols)), 1e-5) << "rank " << rank;
    rng::Stream pick(5);
    const double eps = 1e-3;
    double worst = 0;
    for (int owner = 0; owner < kTp; ++owner) {
      for (int k = 0; k < 12; ++k) {
        const int64_t idx = static_cast<int64_t>(pick.Next() % mine.numel());
        float* v = mine.data_as<float>() + idx;
        const float saved = *v;
        auto at = [&](float value) {
          if (owner == rank) *v = value;
          Context c(kCpu, true, 1);
          return head.Forward(mine, targets, c, 0.5f);
        };
        const double numeric = (at(saved + eps) - at(saved - eps)) / (2 * eps) * 0.5;
        *v = saved;
        if (owner != rank) continue;
        const double analytic = grad.data_as<float>()[idx];
        worst = std::max(worst, std::abs(analytic - numeric) / std::max({std::abs(analytic), std::abs(numeric), 0.05}));
      }
    }
    EXPECT_LT(worst, 1e-2) << "rank " << rank;
  });
}

}  // namespace
}  // namespace strata::nn
