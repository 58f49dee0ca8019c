// GPU tests: every CUDA op against the CPU op on fresh random inputs (tolerances by dtype).
// Skipped when no CUDA device is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <functional>
#include <vector>

#include "common/allocator.h"
#include "trainer/ops/cuda_exec.h"
#include "trainer/ops/ops.h"
#include "trainer/ops/rng.h"
#include "tests/trainer/random_tensor.h"

namespace strata::ops {
namespace {

const Exec kCpu = Exec::Cpu();

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
    auto cuda = CudaExec::Create(0);
    ASSERT_TRUE(cuda.ok()) << cuda.status().ToString();
    cuda_ = std::move(*cuda);
    gpu_ = cuda_->exec();
  }
  void TearDown() override {
    tensors_.clear();
    cuda_.reset();
  }
  Tensor Random(Shape shape, uint64_t seed, float scale = 1.0f) {
    return testing::RandomTensor(std::move(shape), seed, scale);
  }
  Tensor Up(const Tensor& host) {
    Tensor d = NewTensor(gpu_, host.shape(), host.dtype());
    STRATA_CHECK_OK(d.CopyFrom(host));
    tensors_.push_back(d);
    return d;
  }
  Tensor Down(const Tensor& dev) {
    STRATA_CHECK_OK(cuda_->Synchronize());
    Tensor h = NewTensor(kCpu, dev.shape(), dev.dtype());
    STRATA_CHECK_OK(h.CopyFrom(dev));
    return h;
  }
  void ExpectClose(const Tensor& cpu, const Tensor& dev, double tol) {
    Tensor got = Down(dev);
    ASSERT_EQ(cpu.numel(), got.numel());
    for (int64_t i = 0; i < cpu.numel(); ++i) {
      const double want = cpu.data_as<float>()[i];
      ASSERT_NEAR(got.data_as<float>()[i], want, tol * (1 + std::abs(want))) << "at " << i;
    }
  }
  std::unique_ptr<CudaExec> cuda_;
  Exec gpu_;
  std::vector<Tensor> tensors_;
};

TEST_F(CudaOpsTest, Matmul) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = Random(ta ? Shape{2, 33, 17} : Shape{2, 17, 33}, 1);
      Tensor b = Random(tb ? Shape{2, 9, 33} : Shape{2, 33, 9}, 2);
      Tensor c = Random({2, 17, 9}, 3);
      Tensor dc = Up(c);
      Matmul(kCpu, a, b, c, ta, tb, 1.5f, 0.5f);
      Matmul(gpu_, Up(a), Up(b), dc, ta, tb, 1.5f, 0.5f);
      ExpectClose(c, dc, 1e-4);
    }
  }
}

// tf32 and bf16 round the inputs for the tensor cores and accumulate in fp32. 1 + 2^-12 is 1 in
// both (TF32 keeps 10 bits of mantissa, bf16 7), 1 + 2^-9 only in bf16; 64 of them summed show it:
// fp32 gives 64.015625 and 64.125, tf32 64 and 64.125, bf16 64 and 64, under round-to-nearest and
// truncation alike. Then random inputs against float64 within each precision's error bound.
TEST_F(CudaOpsTest, TensorCoreMatmulsRoundTheirInputsAndAccumulateInFp32) {
  constexpr int64_t n = 128;
  struct Case {
    MatmulPrecision p;
    double fine, coarse;  // C's entries for a = 1 + 2^-12 and a = 1 + 2^-9 (k = 64 of each)
    double unit;          // the inputs' largest relative rounding error
  };
  const Case cases[] = {{MatmulPrecision::kFp32, 64.015625, 64.125, 0},
                        {MatmulPrecision::kTf32, 64.0, 64.125, 0x1p-11},
                        {MatmulPrecision::kBf16, 64.0, 64.0, 0x1p-8}};
  for (const Case& c : cases) {
    SCOPED_TRACE(MatmulPrecisionName(c.p));
    Exec ex = gpu_;
    ex.matmul = c.p;
    // Rows 0..63 of A hold 1 + 2^-12 in columns 0..63, rows 64..127 hold 1 + 2^-9 there; the
    // rest is 0; B is all ones.
    Tensor a = NewZeros(kCpu, {n, n}), b = NewTensor(kCpu, {n, n}), out = NewTensor(kCpu, {n, n});
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < 64; ++j) a.data_as<float>()[i * n + j] = i < 64 ? 1.0f + 0x1p-12f : 1.0f + 0x1p-9f;
    }
    Fill(kCpu, b, 1.0f);
    Tensor dout = Up(out);
    Matmul(ex, Up(a), Up(b), dout, false, false);
    Tensor got = Down(dout);
    EXPECT_EQ(got.data_as<float>()[0], c.fine);
    EXPECT_EQ(got.data_as<float>()[63 * n + 127], c.fine);
    EXPECT_EQ(got.data_as<float>()[64 * n], c.coarse);
    EXPECT_EQ(got.data_as<float>()[n * n - 1], c.coarse);

    // Random inputs: each product's rounded inputs are off by at most u each (u = 2^-8 for
    // bf16, 2^-11 for tf32: truncation's bound, twice round-to-nearest's), so each entry within
    // 2u sum|x||w| (plus fp32's own rounding) of the exact product.
    Tensor x = Random({96, 64}, 11), w = Random({64, 80}, 12);
    Tensor dy = Up(NewZeros(kCpu, {96, 80}));
    Matmul(ex, Up(x), Up(w), dy, false, false);
    Tensor y = Down(dy);
    double worst = 0;  // the largest error as a fraction of its bound
    for (int64_t i = 0; i < 96; ++i) {
      for (int64_t j = 0; j < 80; ++j) {
        double exact = 0, magnitude = 0;
        for (int64_t k = 0; k < 64; ++k) {
          const double p = static_cast<double>(x.data_as<float>()[i * 64 + k]) * w.data_as<float>()[k * 80 + j];
          exact += p;
          magnitude += std::abs(p);
        }
        const double bound = 2 * c.unit * magnitude + 64 * 0x1p-24 * magnitude;
        worst = std::max(worst, std::abs(y.data_as<float>()[i * 80 + j] - exact) / bound);
      }
    }
    EXPECT_LE(worst, 1.0);
  }
}

TEST_F(CudaOpsTest, ElementwiseActivationsAndReductions) {
  Tensor x = Random({1000}, 4), y = Random({1000}, 5);
  Tensor out = NewTensor(kCpu, {1000});
  Tensor dout = Up(out);
  Add(kCpu, x, y, out);
  Add(gpu_, Up(x), Up(y), dout);
  ExpectClose(out, dout, 1e-6);
  Gelu(kCpu, x, out);
  Gelu(gpu_, Up(x), dout);
  ExpectClose(out, dout, 1e-5);
  GeluBackward(kCpu, x, y, out);
  GeluBackward(gpu_, Up(x), Up(y), dout);
  ExpectClose(out, dout, 1e-5);
  ReluBackward(kCpu, x, y, out);
  ReluBackward(gpu_, Up(x), Up(y), dout);
  ExpectClose(out, dout, 0);
  EXPECT_NEAR(Sum(gpu_, Up(x)), Sum(kCpu, x), 1e-3);
  EXPECT_NEAR(SumSquares(gpu_, Up(x)), SumSquares(kCpu, x), 1e-2);
  Tensor m = Random({37, 50}, 6), bias = Random({50}, 7), db = Random({50}, 8);
  Tensor dm = Up(m), ddb = Up(db);
  AddBias(kCpu, m, bias);
  AddBias(gpu_, dm, Up(bias));
  ExpectClose(m, dm, 1e-6);
  BiasGrad(kCpu, m, db);
  BiasGrad(gpu_, dm, ddb);
  ExpectClose(db, ddb, 1e-4);
}

// Row widths below 128, below 256, below 1024 and past it: every block size of the row kernels
// (32, 128, 256, 1024 threads), the last one the GPT widths use.
class CudaRowOpsTest : public CudaOpsTest, public ::testing::WithParamInterface<int64_t> {};

TEST_P(CudaRowOpsTest, LayerNormAndSoftmax) {
  const int64_t n = 19, d = GetParam();
  Tensor x = Random({n, d}, 9), g = Random({d}, 10), b = Random({d}, 11), dy = Random({n, d}, 12);
  Tensor y = NewTensor(kCpu, {n, d}), mean = NewTensor(kCpu, {n}), rstd = NewTensor(kCpu, {n});
  Tensor gy = Up(y), gmean = Up(mean), grstd = Up(rstd);
  LayerNorm(kCpu, x, g, b, 1e-5f, y, mean, rstd);
  LayerNorm(gpu_, Up(x), Up(g), Up(b), 1e-5f, gy, gmean, grstd);
  ExpectClose(y, gy, 1e-4);
  Tensor dx = NewTensor(kCpu, {n, d}), dg = NewZeros(kCpu, {d}), dbb = NewZeros(kCpu, {d});
  Tensor gdx = Up(dx), gdg = Up(dg), gdb = Up(dbb);
  LayerNormBackward(kCpu, dy, x, g, mean, rstd, dx, dg, dbb);
  LayerNormBackward(gpu_, Up(dy), Up(x), Up(g), gmean, grstd, gdx, gdg, gdb);
  ExpectClose(dx, gdx, 1e-3);
  ExpectClose(dg, gdg, 1e-3);
  ExpectClose(dbb, gdb, 1e-3);
  // The split halves (the fused op is the two of them): the same values.
  Tensor gdx2 = Up(NewZeros(kCpu, {n, d})), gdg2 = Up(NewZeros(kCpu, {d})), gdb2 = Up(NewZeros(kCpu, {d}));
  LayerNormBackwardInput(gpu_, Up(dy), Up(x), Up(g), gmean, grstd, gdx2);
  LayerNormBackwardWeight(gpu_, Up(dy), Up(x), gmean, grstd, gdg2, gdb2);
  ExpectClose(dx, gdx2, 1e-3);
  ExpectClose(dg, gdg2, 1e-3);
  ExpectClose(dbb, gdb2, 1e-3);
  Softmax(kCpu, x, y);
  Softmax(gpu_, Up(x), gy);
  ExpectClose(y, gy, 1e-5);
  SoftmaxBackward(kCpu, y, dy, dx);
  SoftmaxBackward(gpu_, gy, Up(dy), gdx);
  ExpectClose(dx, gdx, 1e-4);
}

// Column sums (BiasGrad, LayerNorm's dgamma and dbeta) over several chunks of rows and a width
// that is not a multiple of the 32-column tile: the CPU's values, and the same bits every run
// (two passes in a fixed order, no atomics).
TEST_F(CudaOpsTest, ColumnSumsMatchTheCpuAndRepeatBitForBit) {
  for (const int64_t d : {int64_t{50}, int64_t{1500}}) {
    const int64_t n = 1000;  // 4 chunks of 256 rows
    Tensor x = Random({n, d}, 21), g = Random({d}, 22), b = Random({d}, 23), dy = Random({n, d}, 24);
    Tensor y = NewTensor(kCpu, {n, d}), mean = NewTensor(kCpu, {n}), rstd = NewTensor(kCpu, {n});
    LayerNorm(kCpu, x, g, b, 1e-5f, y, mean, rstd);
    Tensor db = NewZeros(kCpu, {d}), dg = NewZeros(kCpu, {d}), dbb = NewZeros(kCpu, {d});
    BiasGrad(kCpu, dy, db);
    LayerNormBackwardWeight(kCpu, dy, x, mean, rstd, dg, dbb);
    std::vector<Tensor> runs;
    for (int run = 0; run < 2; ++run) {
      Tensor gdb = Up(NewZeros(kCpu, {d})), gdg = Up(NewZeros(kCpu, {d})), gdbb = Up(NewZeros(kCpu, {d}));
      BiasGrad(gpu_, Up(dy), gdb);
      LayerNormBackwardWeight(gpu_, Up(dy), Up(x), Up(mean), Up(rstd), gdg, gdbb);
      ExpectClose(db, gdb, 1e-3);
      ExpectClose(dg, gdg, 1e-3);
      ExpectClose(dbb, gdbb, 1e-3);
      runs.insert(runs.end(), {Down(gdb), Down(gdg), Down(gdbb)});
    }
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(std::memcmp(runs[k].data(), runs[k + 3].data(), runs[k].nbytes()), 0) << "output " << k << ", width " << d;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, CudaRowOpsTest, ::testing::Values(int64_t{100}, int64_t{200}, int64_t{300}, int64_t{1500}));

// Empty GEMMs: nothing to write, or (k = 0) C = beta C, as on the CPU.
TEST_F(CudaOpsTest, EmptyMatmul) {
  Tensor a = NewTensor(kCpu, {5, 0}), b = NewTensor(kCpu, {0, 4}), c = Random({5, 4}, 24);
  Tensor gc = Up(c);
  Matmul(kCpu, a, b, c, false, false, 1.0f, 0.5f);
  Matmul(gpu_, Up(a), Up(b), gc, false, false, 1.0f, 0.5f);
  ExpectClose(c, gc, 0);
  Tensor a0 = NewTensor(kCpu, {0, 3}), b0 = Random({3, 4}, 25), c0 = NewTensor(kCpu, {0, 4});
  Matmul(gpu_, Up(a0), Up(b0), Up(c0), false, false);
  ASSERT_TRUE(cuda_->Synchronize().ok());
}

// A target outside the vocabulary stops the kernel, as on the CPU (a death-test child: the trap
// poisons the CUDA context).
TEST_F(CudaOpsTest, CrossEntropyTargetOutsideTheVocabularyFailsTheLaunch) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor logits = Up(Random({2, 5}, 26)), d = Up(NewTensor(kCpu, {2, 5}));
  Tensor targets = NewTensor(kCpu, {2}, DType::kI32);
  targets.data_as<int32_t>()[0] = 1;
  targets.data_as<int32_t>()[1] = 5;
  Tensor gt = Up(targets);
  EXPECT_DEATH(
      {
        dup2(STDERR_FILENO, STDOUT_FILENO);  // the kernel's printf goes to stdout
        CrossEntropy(gpu_, logits, gt, d);
        std::abort();
      },
      "target 5 of row 1 >= vocab 5");
}

TEST_F(CudaOpsTest, AttentionForwardBackwardAndHeads) {
  const int64_t b = 2, h = 3, t = 33, hd = 16, c = h * hd;
  Tensor qkv = Random({b * t, 3 * c}, 13);
  const Shape hs{b, h, t, hd};
  Tensor q = NewTensor(kCpu, hs), k = NewTensor(kCpu, hs), v = NewTensor(kCpu, hs);
  Tensor gq = Up(q), gk = Up(k), gv = Up(v);
  SplitHeads(kCpu, qkv, b, h, q, k, v);
  SplitHeads(gpu_, Up(qkv), b, h, gq, gk, gv);
  ExpectClose(q, gq, 0);
  ExpectClose(v, gv, 0);
  Tensor att = NewTensor(kCpu, {b, h, t, t}), out = NewTensor(kCpu, hs);
  Tensor gatt = Up(att), gout = Up(out);
  CausalAttention(kCpu, q, k, v, att, out);
  CausalAttention(gpu_, gq, gk, gv, gatt, gout);
  ExpectClose(att, gatt, 1e-4);
  ExpectClose(out, gout, 1e-4);
  Tensor dout = Random(hs, 14);
  Tensor dq = NewTensor(kCpu, hs), dk = NewTensor(kCpu, hs), dv = NewTensor(kCpu, hs);
  Tensor gdq = Up(dq), gdk = Up(dk), gdv = Up(dv);
  CausalAttentionBackward(kCpu, q, k, v, att, dout, dq, dk, dv);
  CausalAttentionBackward(gpu_, gq, gk, gv, gatt, Up(dout), gdq, gdk, gdv);
  ExpectClose(dq, gdq, 1e-3);
  ExpectClose(dk, gdk, 1e-3);
  ExpectClose(dv, gdv, 1e-3);
  Tensor merged = NewTensor(kCpu, {b * t, c}), gmerged = Up(merged);
  MergeHeads(kCpu, out, merged);
  MergeHeads(gpu_, gout, gmerged);
  ExpectClose(merged, gmerged, 1e-4);
  Tensor dqkv = NewTensor(kCpu, {b * t, 3 * c}), gdqkv = Up(dqkv);
  MergeHeadsGrad(kCpu, dq, dk, dv, dqkv);
  MergeHeadsGrad(gpu_, gdq, gdk, gdv, gdqkv);
  ExpectClose(dqkv, gdqkv, 1e-3);
}

TEST_F(CudaOpsTest, Losses) {
  const int64_t n = 13, v = 257;
  Tensor logits = Random({n, v}, 15, 2.0f), d = NewTensor(kCpu, {n, v}), gd = Up(d);
  Tensor targets = NewTensor(kCpu, {n}, DType::kI32);
  for (int64_t i = 0; i < n; ++i) targets.data_as<int32_t>()[i] = i == 3 ? -1 : static_cast<int32_t>(i * 31 % v);
  const double loss = CrossEntropy(kCpu, logits, targets, d, 0.5f);
  EXPECT_NEAR(CrossEntropy(gpu_, Up(logits), Up(targets), gd, 0.5f), loss, 1e-4);
  ExpectClose(d, gd, 1e-5);
  Tensor p = Random({n, 7}, 16), t = Random({n, 7}, 17), dp = NewTensor(kCpu, {n, 7}), gdp = Up(dp);
  EXPECT_NEAR(Mse(gpu_, Up(p), Up(t), gdp), Mse(kCpu, p, t, dp), 1e-4);
  ExpectClose(dp, gdp, 1e-5);
  Tensor z = Random({n}, 18), y = NewTensor(kCpu, {n}), dz = NewTensor(kCpu, {n}), gdz = Up(dz);
  for (int64_t i = 0; i < n; ++i) y.data_as<float>()[i] = i % 2;
  EXPECT_NEAR(BceWithLogits(gpu_, Up(z), Up(y), gdz), BceWithLogits(kCpu, z, y, dz), 1e-5);
  ExpectClose(dz, gdz, 1e-5);
}

TEST_F(CudaOpsTest, EmbeddingDropoutOptimizersCasts) {
  Tensor table = Random({50, 8}, 19), ids = NewTensor(kCpu, {30}, DType::kI32);
  for (int i = 0; i < 30; ++i) ids.data_as<int32_t>()[i] = (i * 7) % 50 / 2;
  Tensor rows = NewTensor(kCpu, {30, 8}), grows = Up(rows);
  EmbeddingGather(kCpu, table, ids, rows);
  EmbeddingGather(gpu_, Up(table), Up(ids), grows);
  ExpectClose(rows, grows, 0);
  Tensor dt = NewZeros(kCpu, {50, 8}), gdt = Up(dt);
  EmbeddingScatterAdd(kCpu, rows, ids, dt);
  EmbeddingScatterAdd(gpu_, grows, Up(ids), gdt);
  ExpectClose(dt, gdt, 1e-5);
  Tensor x = Random({5000}, 20), y = NewTensor(kCpu, {5000}), gy = Up(y);
  Dropout(kCpu, x, 0.3f, 77, y);
  Dropout(gpu_, Up(x), 0.3f, 77, gy);
  ExpectClose(y, gy, 1e-6);  // the same mask on both devices
  Tensor w = Random({500}, 21), g = Random({500}, 22), m = NewZeros(kCpu, {500}), v = NewZeros(kCpu, {500});
  Tensor gw = Up(w), gm = Up(m), gv = Up(v), gg = Up(g);
  for (int step = 1; step <= 3; ++step) {
    AdamWUpdate(kCpu, w, g, m, v, 0.01f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
    AdamWUpdate(gpu_, gw, gg, gm, gv, 0.01f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
  }
  ExpectClose(w, gw, 1e-5);
  SgdUpdate(kCpu, w, g, m, 0.1f, 0.9f, 0.01f, true);
  SgdUpdate(gpu_, gw, gg, gm, 0.1f, 0.9f, 0.01f, true);
  ExpectClose(w, gw, 1e-5);
  for (DType dt16 : {DType::kBF16, DType::kF16}) {
    Tensor h = NewTensor(kCpu, {5000}, dt16), gh = NewTensor(gpu_, {5000}, dt16);
    tensors_.push_back(gh);
    Cast(kCpu, x, h);
    Cast(gpu_, Up(x), gh);
    Tensor back = NewTensor(kCpu, {5000}), gback = Up(back);
    Cast(kCpu, h, back);
    Cast(gpu_, gh, gback);
    ExpectClose(back, gback, 0);  // both round to nearest even: bit-identical
  }
}

// An id outside the table stops the kernel (it prints the id and traps) instead of reading or
// writing past the table; the next synchronisation reports the failed launch. The trap poisons
// the CUDA context, so the op runs in a death-test child of its own. (Written and compiled here;
// it runs only where a GPU is present.)
TEST_F(CudaOpsTest, EmbeddingIdOutsideTheTableFailsTheLaunch) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor table = Up(Random({10, 4}, 23)), ids = NewTensor(kCpu, {3}, DType::kI64);
  ids.data_as<int64_t>()[0] = 1;
  ids.data_as<int64_t>()[1] = 10;
  ids.data_as<int64_t>()[2] = 2;
  Tensor gids = Up(ids), rows = Up(NewTensor(kCpu, {3, 4}));
  EXPECT_DEATH(
      {
        dup2(STDERR_FILENO, STDOUT_FILENO);  // the kernel's printf goes to stdout
        EmbeddingGather(gpu_, table, gids, rows);
        const Status s = cuda_->Synchronize();
        std::fprintf(stderr, "synchronize: %s\n", s.ToString().c_str());
        std::abort();
      },
      "id 10 at position 1 outside \\[0, 10\\)");
}

}  // namespace
}  // namespace strata::ops
