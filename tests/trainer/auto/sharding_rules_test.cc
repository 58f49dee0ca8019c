// sharding_rules_test.cc: each per-operator rule, checked by running the op: inputs placed on a
// mesh (1-D of 2 and 4 ranks, 2-D of 2 x 2; ranks as threads over in-process Gloo), resharded
// to what the rule asks (Reshard), the trainer's CPU op run on the local pieces, and the outputs
// (placed as the rule says) gathered and held against the dense op, forward and backward.
#include "trainer/auto/sharding_rules.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <thread>

#include "tests/trainer/inproc_trainers.h"
#include "tests/trainer/random_tensor.h"
#include "trainer/auto/reshard.h"
#include "trainer/comm/gloo_communicator.h"
#include "trainer/ops/ops.h"

namespace strata {
namespace {

using testing::RandomTensor;
const ops::Exec kCpu = ops::Exec::Cpu();
const Placement kR = Replicate{};
const Placement kP = Partial{ReduceOp::kSum};

ProcessMesh Mesh(std::vector<MeshDim> dims) { return *ProcessMesh::Make(std::move(dims)); }

std::vector<ProcessMesh> Meshes() {
  return {Mesh({{"x", 2}}), Mesh({{"x", 4}}), Mesh({{"x", 2}, {"y", 2}})};
}

// Every combination of `one` over the mesh's dimensions.
std::vector<Placements> AllOf(const ProcessMesh& mesh, const std::vector<Placement>& one) {
  std::vector<Placements> all = {{}};
  for (int d = 0; d < mesh.ndim(); ++d) {
    std::vector<Placements> longer;
    for (const Placements& prefix : all) {
      for (const Placement& p : one) {
        longer.push_back(prefix);
        longer.back().push_back(p);
      }
    }
    all = std::move(longer);
  }
  return all;
}

Tensor New(Shape shape) { return ops::NewZeros(kCpu, std::move(shape)); }

// Integer ids as floats (DistTensor moves f32) and back.
Tensor Ids(int64_t n, int64_t vocab, uint64_t seed) {
  Tensor t = New({n});
  for (int64_t i = 0; i < n; ++i) t.data_as<float>()[i] = static_cast<float>((i * 7 + seed) % vocab);
  return t;
}
Tensor ToI32(const Tensor& f) {
  Tensor t = ops::NewTensor(kCpu, f.shape(), DType::kI32);
  for (int64_t i = 0; i < f.numel(); ++i) t.data_as<int32_t>()[i] = static_cast<int32_t>(f.data_as<float>()[i]);
  return t;
}

// One rank's view of a rule check.
class RankCheck {
 public:
  RankCheck(const ProcessMesh& mesh, int rank, MeshComms& comms)
      : mesh_(mesh), rank_(rank), comms_(comms) {}

  // `dense` placed as `start`, then resharded to `want`.
  DistTensor Place(const std::string& name, const Tensor& dense, const Placements& start,
                   const Placements& want) {
    Result<DistTensor> t = ShardTensor(name, dense, mesh_, start, rank_);
    STRATA_CHECK(t.ok()) << t.status().ToString();
    Result<DistTensor> out = Reshard(*t, want, comms_);
    STRATA_CHECK(out.ok()) << out.status().ToString();
    return *out;
  }

  // `local` is this rank's piece of an output placed as `placements`: gathered, it is `want`.
  void Expect(const std::string& what, const Tensor& local, const Placements& placements,
              const Tensor& want, float tol = 2e-5f) {
    Result<DistTensor> t = DistTensor::Make("out", local, want.shape(), mesh_, placements, rank_);
    ASSERT_TRUE(t.ok()) << what << ": " << t.status().ToString();
    Result<DistTensor> full = Reshard(*t, Placements(mesh_.ndim(), kR), comms_);
    ASSERT_TRUE(full.ok()) << what << ": " << full.status().ToString();
    const float* got = full->local().data_as<float>();
    const float* w = want.data_as<float>();
    for (int64_t i = 0; i < want.numel(); ++i) {
      ASSERT_NEAR(got[i], w[i], tol * (1 + std::fabs(w[i])))
          << what << " on " << mesh_.ToString() << " rank " << rank_ << " element " << i;
    }
  }

  Shape LocalShapeOf(const Shape& shape, const Placements& placements) const {
    return *LocalShape(shape, mesh_, placements, mesh_.Coords(rank_));
  }

  // The offset of this rank's piece along `axis` under `placements`.
  int64_t Offset(const Shape& shape, const Placements& placements, int axis) const {
    return (*LocalOffset(shape, mesh_, placements, mesh_.Coords(rank_)))[axis];
  }

 private:
  const ProcessMesh& mesh_;
  const int rank_;
  MeshComms& comms_;
};

class ShardingRulesTest : public InprocTrainersTest {
 protected:
  void SetUp() override { StartTrainers(4); }

  // Runs body on every rank of every mesh of Meshes(), ranks as threads.
  void OnEveryMesh(const std::function<void(const ProcessMesh&, RankCheck&)>& body) {
    for (const ProcessMesh& mesh : Meshes()) {
      const std::string prefix = "rules/" + std::to_string(round_++);
      std::vector<std::thread> threads;
      for (int r = 0; r < mesh.size(); ++r) {
        threads.emplace_back([&, r] {
          CommunicatorFactory make = [&](const std::string& name, int rank, int size) {
            return MakeGlooCommunicator(*nodes_[r], name, rank, size);
          };
          Result<MeshComms> comms = MakeMeshComms(mesh, r, prefix, make);
          ASSERT_TRUE(comms.ok()) << comms.status().ToString();
          RankCheck check(mesh, r, *comms);
          body(mesh, check);
        });
      }
      for (auto& t : threads) t.join();
    }
  }

  int round_ = 0;
};

Tensor DenseMatmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  Tensor c = New({a.size(ta ? 1 : 0), b.size(tb ? 0 : 1)});
  ops::Matmul(kCpu, a, b, c, ta, tb);
  return c;
}

// The seeds' examples of the matmul rule.
TEST(ShardingRules, MatmulSeedExamples) {
  EXPECT_EQ(ToString(*MatmulRule({Shard{0}}, {kR}, false, false)), "[S(0)] x [R] -> [S(0)]");
  EXPECT_EQ(ToString(*MatmulRule({kR}, {Shard{1}}, false, false)), "[R] x [S(1)] -> [S(1)]");
  EXPECT_EQ(ToString(*MatmulRule({Shard{1}}, {Shard{0}}, false, false)),
            "[S(1)] x [S(0)] -> [P(sum)]");
  // Data parallelism's weight gradient x^T @ dy with rows sharded is a partial sum.
  auto grads = MatmulBackwardRule({Shard{0}}, {kR}, {Shard{0}}, false, false);
  ASSERT_TRUE(grads.ok());
  EXPECT_EQ(ToString((*grads)[1]), "[S(0)] x [S(0)] -> [P(sum)]");
  EXPECT_FALSE(MatmulRule({kR, kR}, {kR}, false, false).ok());
}

TEST_F(ShardingRulesTest, MatmulEitherOperandTransposed) {
  constexpr int64_t M = 6, K = 8, N = 4;
  OnEveryMesh([&](const ProcessMesh& mesh, RankCheck& check) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const Tensor a = RandomTensor(ta ? Shape{K, M} : Shape{M, K}, 1);
        const Tensor b = RandomTensor(tb ? Shape{N, K} : Shape{K, N}, 2);
        const Tensor dout = RandomTensor({M, N}, 3);
        const MatmulGradFlags f = MatmulGradTransposes(ta, tb);
        const Tensor da = ta ? DenseMatmul(b, dout, f.da_trans_first, f.da_trans_second)
                             : DenseMatmul(dout, b, f.da_trans_first, f.da_trans_second);
        const Tensor db = tb ? DenseMatmul(dout, a, f.db_trans_first, f.db_trans_second)
                             : DenseMatmul(a, dout, f.db_trans_first, f.db_trans_second);
        ASSERT_EQ(da.shape(), a.shape());
        ASSERT_EQ(db.shape(), b.shape());
        for (const Placements& pa : AllOf(mesh, {kR, Shard{0}, Shard{1}, kP})) {
          for (const Placements& pb : AllOf(mesh, {kR, Shard{0}, Shard{1}})) {
            const std::string what = "matmul ta=" + std::to_string(ta) + " tb=" +
                                     std::to_string(tb) + " " + ToString(pa) + " x " + ToString(pb);
            const OpSharding s = *MatmulRule(pa, pb, ta, tb);
            const DistTensor la = check.Place("a", a, pa, s.inputs[0]);
            const DistTensor lb = check.Place("b", b, pb, s.inputs[1]);
            check.Expect(what, DenseMatmul(la.local(), lb.local(), ta, tb), s.outputs[0],
                         DenseMatmul(a, b, ta, tb));
            // Backward, dout placed as the forward output.
            const auto g = *MatmulBackwardRule(s.inputs[0], s.inputs[1], s.outputs[0], ta, tb);
            const Placements& a_now = s.inputs[0];
            const Placements& b_now = s.inputs[1];
            const Placements& d_now = s.outputs[0];
            {
              const OpSharding& r = g[0];
              const DistTensor x = ta ? check.Place("b", b, b_now, r.inputs[0])
                                      : check.Place("dout", dout, d_now, r.inputs[0]);
              const DistTensor y = ta ? check.Place("dout", dout, d_now, r.inputs[1])
                                      : check.Place("b", b, b_now, r.inputs[1]);
              check.Expect(what + " da",
                           DenseMatmul(x.local(), y.local(), f.da_trans_first, f.da_trans_second),
                           r.outputs[0], da);
            }
            {
              const OpSharding& r = g[1];
              const DistTensor x = tb ? check.Place("dout", dout, d_now, r.inputs[0])
                                      : check.Place("a", a, a_now, r.inputs[0]);
              const DistTensor y = tb ? check.Place("a", a, a_now, r.inputs[1])
                                      : check.Place("dout", dout, d_now, r.inputs[1]);
              check.Expect(what + " db",
                           DenseMatmul(x.local(), y.local(), f.db_trans_first, f.db_trans_second),
                           r.outputs[0], db);
            }
          }
        }
      }
    }
  });
}

// x [6, 8] + bias [8] (broadcast), with the bias gradient a column sum.
TEST_F(ShardingRulesTest, BiasAddBroadcasts) {
  const Shape xs = {6, 8}, bs = {8};
  const Tensor x = RandomTensor(xs, 4), bias = RandomTensor(bs, 5), dout = RandomTensor(xs, 6);
  Tensor y = New(xs);
  ops::Copy(kCpu, x, y);
  ops::AddBias(kCpu, y, bias);
  Tensor dbias = New(bs);
  ops::BiasGrad(kCpu, dout, dbias);
  OnEveryMesh([&](const ProcessMesh& mesh, RankCheck& check) {
    for (const Placements& px : AllOf(mesh, {kR, Shard{0}, Shard{1}, kP})) {
      for (const Placements& pb : AllOf(mesh, {kR, Shard{0}, kP})) {
        const std::string what = "bias add " + ToString(px) + " + " + ToString(pb);
        const OpSharding s = *ElementwiseRule(ElementwiseKind::kAdd, {xs, bs}, {px, pb});
        const DistTensor lx = check.Place("x", x, px, s.inputs[0]);
        const DistTensor lb = check.Place("bias", bias, pb, s.inputs[1]);
        Tensor ly = New(lx.local().shape());
        ops::Copy(kCpu, lx.local(), ly);
        ops::AddBias(kCpu, ly, lb.local());
        check.Expect(what, ly, s.outputs[0], y);

        const OpSharding g =
            *ElementwiseBackwardRule(ElementwiseKind::kAdd, {xs, bs}, s.inputs, s.outputs[0]);
        const DistTensor ld = check.Place("dout", dout, s.outputs[0], g.inputs[2]);
        check.Expect(what + " dx", ld.local(), g.outputs[0], dout);
        Tensor ldb = New({ld.local().size(1)});
        ops::BiasGrad(kCpu, ld.local(), ldb);
        check.Expect(what + " dbias", ldb, g.outputs[1], dbias);
      }
    }
  });
}

// x * y (same shapes) and GELU(x).
TEST_F(ShardingRulesTest, MulAndGelu) {
  const Shape xs = {6, 8};
  const Tensor x = RandomTensor(xs, 7), y = RandomTensor(xs, 8), dout = RandomTensor(xs, 9);
  Tensor prod = New(xs), dx_mul = New(xs), dy_mul = New(xs), gelu = New(xs), dgelu = New(xs);
  ops::Mul(kCpu, x, y, prod);
  ops::Mul(kCpu, dout, y, dx_mul);
  ops::Mul(kCpu, dout, x, dy_mul);
  ops::Gelu(kCpu, x, gelu);
  ops::GeluBackward(kCpu, x, dout, dgelu);
  OnEveryMesh([&](const ProcessMesh& mesh, RankCheck& check) {
    for (const Placements& px : AllOf(mesh, {kR, Shard{0}, Shard{1}, kP})) {
      for (const Placements& py : AllOf(mesh, {kR, Shard{1}, kP})) {
        const std::string what = "mul " + ToString(px) + " * " + ToString(py);
        const OpSharding s = *ElementwiseRule(ElementwiseKind::kMul, {xs, xs}, {px, py});
        const DistTensor lx = check.Place("x", x, px, s.inputs[0]);
        const DistTensor ly = check.Place("y", y, py, s.inputs[1]);
        Tensor out = New(lx.local().shape());
        ops::Mul(kCpu, lx.local(), ly.local(), out);
        check.Expect(what, out, s.outputs[0], prod);
        const OpSharding g =
            *ElementwiseBackwardRule(ElementwiseKind::kMul, {xs, xs}, s.inputs, s.outputs[0]);
        const DistTensor gx = check.Place("x", x, s.inputs[0], g.inputs[0]);
        const DistTensor gy = check.Place("y", y, s.inputs[1], g.inputs[1]);
        const DistTensor gd = check.Place("dout", dout, s.outputs[0], g.inputs[2]);
        Tensor dx = New(gd.local().shape()), dy = New(gd.local().shape());
        ops::Mul(kCpu, gd.local(), gy.local(), dx);
        ops::Mul(kCpu, gd.local(), gx.local(), dy);
        check.Expect(what + " dx", dx, g.outputs[0], dx_mul);
        check.Expect(what + " dy", dy, g.outputs[1], dy_mul);
      }
      const std::string what = "gelu " + ToString(px);
      const OpSharding s = *ElementwiseRule(ElementwiseKind::kNonlinear, {xs}, {px});
      const DistTensor lx = check.Place("x", x, px, s.inputs[0]);
      Tensor out = New(lx.local().shape());
      ops::Gelu(kCpu, lx.local(), out);
      check.Expect(what, out, s.outputs[0], gelu);
      const OpSharding g =
          *ElementwiseBackwardRule(ElementwiseKind::kNonlinear, {xs}, s.inputs, s.outputs[0]);
      const DistTensor gx = check.Place("x", x, s.inputs[0], g.inputs[0]);
      const DistTensor gd = check.Place("dout", dout, s.outputs[0], g.inputs[1]);
      Tensor dx = New(gd.local().shape());
      ops::GeluBackward(kCpu, gx.local(), gd.local(), dx);
      check.Expect(what + " dx", dx, g.outputs[0], dgelu);
    }
  });
}

TEST_F(ShardingRulesTest, LayerNormAndSoftmax) {
  constexpr int64_t N = 6, D = 8;
  const Tensor x = RandomTensor({N, D}, 10), gamma = RandomTensor({D}, 11);
  const Tensor beta = RandomTensor({D}, 12), dout = RandomTensor({N, D}, 13);
  Tensor y = New({N, D}), mean = New({N}), rstd = New({N}), dx = New({N, D});
  Tensor dgamma = New({D}), dbeta = New({D}), sm = New({N, D}), dsm = New({N, D});
  ops::LayerNorm(kCpu, x, gamma, beta, 1e-5f, y, mean, rstd);
  ops::LayerNormBackward(kCpu, dout, x, gamma, mean, rstd, dx, dgamma, dbeta);
  ops::Softmax(kCpu, x, sm);
  ops::SoftmaxBackward(kCpu, sm, dout, dsm);
  OnEveryMesh([&](const ProcessMesh& mesh, RankCheck& check) {
    for (const Placements& px : AllOf(mesh, {kR, Shard{0}, Shard{1}, kP})) {
      const std::string what = "layer norm " + ToString(px);
      const OpSharding s = *LayerNormRule(px);
      const DistTensor lx = check.Place("x", x, px, s.inputs[0]);
      const DistTensor lg = check.Place("gamma", gamma, Placements(mesh.ndim(), kR), s.inputs[1]);
      const DistTensor lb = check.Place("beta", beta, Placements(mesh.ndim(), kR), s.inputs[2]);
      const int64_t n = lx.local().size(0);
      Tensor ly = New({n, D}), lm = New({n}), lr = New({n});
      ops::LayerNorm(kCpu, lx.local(), lg.local(), lb.local(), 1e-5f, ly, lm, lr);
      check.Expect(what, ly, s.outputs[0], y);
      const OpSharding g = *LayerNormBackwardRule(s.inputs[0]);
      const DistTensor ld = check.Place("dout", dout, s.outputs[0], g.inputs[1]);
      Tensor ldx = New({n, D}), ldg = New({D}), ldb = New({D});
      ops::LayerNormBackward(kCpu, ld.local(), lx.local(), lg.local(), lm, lr, ldx, ldg, ldb);
      check.Expect(what + " dx", ldx, g.outputs[0], dx, 1e-4f);
      check.Expect(what + " dgamma", ldg, g.outputs[1], dgamma, 1e-4f);
      check.Expect(what + " dbeta", ldb, g.outputs[2], dbeta, 1e-4f);

      const OpSharding ss = *SoftmaxRule(px);
      const DistTensor sx = check.Place("x", x, px, ss.inputs[0]);
      Tensor sy = New(sx.local().shape());
      ops::Softmax(kCpu, sx.local(), sy);
      check.Expect("softmax " + ToString(px), sy, ss.outputs[0], sm);
      const OpSharding sg = *SoftmaxBackwardRule(ss.outputs[0]);
      const DistTensor gy = check.Place("y", sm, ss.outputs[0], sg.inputs[0]);
      const DistTensor gd = check.Place("dout", dout, ss.outputs[0], sg.inputs[1]);
      Tensor gdx = New(gy.local().shape());
      ops::SoftmaxBackward(kCpu, gy.local(), gd.local(), gdx);
      check.Expect("softmax " + ToString(px) + " dx", gdx, sg.outputs[0], dsm);
    }
  });
}

// x [B*T, C] -> [B, H, T, C/H] and back; a batch of 2 on 4 ranks cannot keep its row shard.
TEST_F(ShardingRulesTest, AttentionHeadSplitAndMerge) {
  constexpr int64_t T = 3, H = 4, hd = 2, C = H * hd;
  for (int64_t B : {2, 4}) {
    const Tensor x = RandomTensor({B * T, C}, 14), dy = RandomTensor({B, H, T, hd}, 15);
    Tensor y = New({B, H, T, hd}), dx = New({B * T, C});
    ops::SplitHeadsGrad(kCpu, x, y);  // [B*T, C] -> [B, H, T, hd]
    ops::MergeHeads(kCpu, dy, dx);    // its backward
    OnEveryMesh([&](const ProcessMesh& mesh, RankCheck& check) {
      for (const Placements& px : AllOf(mesh, {kR, Shard{0}, Shard{1}, kP})) {
        const std::string what = "split heads B=" + std::to_string(B) + " " + ToString(px);
        const OpSharding s = *SplitHeadsRule(mesh, px, B, H);
        const DistTensor lx = check.Place("x", x, px, s.inputs[0]);
        const Shape ls = lx.local().shape();
        // The local batch and heads follow from the local rows and columns.
        const int64_t lb = ls[0] / T, lh = ls[1] / hd;
        ASSERT_EQ(lb * T, ls[0]) << what;
        Tensor ly = New({lb, lh, T, hd});
        ops::SplitHeadsGrad(kCpu, lx.local(), ly);
        check.Expect(what, ly, s.outputs[0], y);
        // Backward: a merge of dy, placed as the split's output.
        const OpSharding g = *MergeHeadsRule(mesh, s.outputs[0], B, H);
        const DistTensor ld = check.Place("dy", dy, s.outputs[0], g.inputs[0]);
        const Shape ds = ld.local().shape();
        Tensor ldx = New({ds[0] * T, ds[1] * hd});
        ops::MergeHeads(kCpu, ld.local(), ldx);
        check.Expect(what + " dx", ldx, g.outputs[0], dx);
      }
    });
  }
}

// table [V, D], ids [N] -> rows [N, D]; a vocabulary slice gathers only its own ids.
TEST_F(ShardingRulesTest, EmbeddingLookup) {
  constexpr int64_t V = 10, D = 6, N = 8;
  const Tensor table = RandomTensor({V, D}, 16), ids = Ids(N, V, 3), drows = RandomTensor({N, D}, 17);
  Tensor rows = New({N, D}), dtable = New({V, D});
  ops::EmbeddingGather(kCpu, table, ToI32(ids), rows);
  ops::EmbeddingScatterAdd(kCpu, drows, ToI32(ids), dtable);
  OnEveryMesh([&](const ProcessMesh& mesh, RankCheck& check) {
    for (const Placements& pt : AllOf(mesh, {kR, Shard{0}, Shard{1}})) {
      for (const Placements& pi : AllOf(mesh, {kR, Shard{0}})) {
        const std::string what = "embedding " + ToString(pt) + " [" + ToString(pi) + "]";
        const OpSharding s = *EmbeddingRule(pt, pi);
        const DistTensor lt = check.Place("table", table, pt, s.inputs[0]);
        const DistTensor li = check.Place("ids", ids, pi, s.inputs[1]);
        const int64_t first = check.Offset({V, D}, s.inputs[0], 0);
        Tensor lr = New({li.local().size(0), lt.local().size(1)});
        ops::EmbeddingGatherRange(kCpu, lt.local(), ToI32(li.local()), first, lr);
        check.Expect(what, lr, s.outputs[0], rows);
        const OpSharding g = *EmbeddingBackwardRule(s.inputs[0], s.inputs[1]);
        const DistTensor gd = check.Place("drows", drows, s.outputs[0], g.inputs[2]);
        Tensor ldt = New(lt.local().shape());
        ops::EmbeddingScatterAddRange(kCpu, gd.local(), ToI32(li.local()), first, ldt);
        check.Expect(what + " dtable", ldt, g.outputs[0], dtable);
      }
    }
  });
}

// The mean cross-entropy over rows, a [1] tensor, and its gradient.
TEST_F(ShardingRulesTest, CrossEntropy) {
  constexpr int64_t N = 8, V = 10;
  const Tensor logits = RandomTensor({N, V}, 18), targets = Ids(N, V, 5);
  Tensor dlogits = New({N, V}), loss = New({1});
  loss.data_as<float>()[0] =
      static_cast<float>(ops::CrossEntropy(kCpu, logits, ToI32(targets), dlogits));
  OnEveryMesh([&](const ProcessMesh& mesh, RankCheck& check) {
    for (const Placements& pl : AllOf(mesh, {kR, Shard{0}, Shard{1}, kP})) {
      for (const Placements& pt : AllOf(mesh, {kR, Shard{0}})) {
        const std::string what = "cross-entropy " + ToString(pl) + " " + ToString(pt);
        const OpSharding s = *CrossEntropyRule(pl, pt);
        const DistTensor ll = check.Place("logits", logits, pl, s.inputs[0]);
        const DistTensor lt = check.Place("targets", targets, pt, s.inputs[1]);
        const int64_t n = ll.local().size(0);
        const float share = static_cast<float>(n) / N;  // this rank's rows of the mean
        Tensor ld = New(ll.local().shape()), l = New({1});
        l.data_as<float>()[0] = static_cast<float>(
            ops::CrossEntropy(kCpu, ll.local(), ToI32(lt.local()), ld, share) * share);
        check.Expect(what, l, s.outputs[0], loss);
        check.Expect(what + " dlogits", ld, s.inputs[0], dlogits);
      }
    }
  });
}

TEST_F(ShardingRulesTest, SumAndMean) {
  const Shape xs = {6, 8};
  const Tensor x = RandomTensor(xs, 19);
  const float total = static_cast<float>(ops::Sum(kCpu, x));
  OnEveryMesh([&](const ProcessMesh& mesh, RankCheck& check) {
    for (const Placements& px : AllOf(mesh, {kR, Shard{0}, Shard{1}, kP,
                                             Partial{ReduceOp::kAvg}, Partial{ReduceOp::kMax}})) {
      for (ReductionKind kind : {ReductionKind::kSum, ReductionKind::kMean}) {
        const float scale = kind == ReductionKind::kMean ? 1.0f / 48 : 1.0f;
        const std::string what = std::string(kind == ReductionKind::kSum ? "sum " : "mean ") +
                                 ToString(px);
        const OpSharding s = *ReductionRule(kind, px);
        const DistTensor lx = check.Place("x", x, px, s.inputs[0]);
        Tensor l = New({1}), want = New({1});
        l.data_as<float>()[0] = static_cast<float>(ops::Sum(kCpu, lx.local())) * scale;
        want.data_as<float>()[0] = total * scale;
        check.Expect(what, l, s.outputs[0], want);
        // Backward: dx = dout (a replicated scalar, here 1) times the scale, in x's placement
        // without its Partial dimensions: every rank fills its piece.
        const OpSharding g = *ReductionBackwardRule(kind, px);
        Tensor dense_dx = New(xs);
        ops::Fill(kCpu, dense_dx, scale);
        Tensor mine = New(check.LocalShapeOf(xs, g.outputs[0]));
        ops::Fill(kCpu, mine, scale);
        check.Expect(what + " dx", mine, g.outputs[0], dense_dx);
      }
    }
  });
}

}  // namespace
}  // namespace strata
