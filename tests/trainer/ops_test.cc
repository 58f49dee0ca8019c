// Tests for trainer/ops: each CPU op against a naive float64 reference on random inputs.
#include "trainer/ops/ops.h"
#include "tests/trainer/random_tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "trainer/ops/parallel.h"
#include "trainer/ops/rng.h"

namespace strata::ops {
namespace {

const Exec kCpu = Exec::Cpu();

Tensor Random(Shape shape, uint64_t seed, float scale = 1.0f) {
  return testing::RandomTensor(std::move(shape), seed, scale);
}
std::vector<double> D(const Tensor& t) {
  return std::vector<double>(t.data_as<float>(), t.data_as<float>() + t.numel());
}
void ExpectNear(const Tensor& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got.data_as<float>()[i], want[i], tol * (1 + std::abs(want[i]))) << "at " << i;
  }
}

// Every index is visited exactly once, in chunks of the grain, from any number of callers.
TEST(ParallelForTest, CoversEveryIndexOnceFromConcurrentCallers) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{1} << 20, (int64_t{1} << 20) + 7}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    ParallelFor(n, 4096, [&](int64_t lo, int64_t hi) {
      EXPECT_EQ(lo % 4096, 0);
      EXPECT_LE(hi - lo, 4096);
      for (int64_t i = lo; i < hi; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "n " << n;
  }
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep) {
        ParallelFor(100000, 1000, [&](int64_t lo, int64_t hi) { total += hi - lo; });
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(total.load(), 4 * 50 * 100000);
}

// Elementwise ops over the pool agree with a plain loop, and reductions give the same bits
// however many chunks there are (partials are summed in chunk order).
TEST(ParallelForTest, PooledOpsMatchPlainLoops) {
  const int64_t n = 3 * kParallelGrain + 123;
  Tensor x = NewTensor(Exec::Cpu(), {n}), y = NewTensor(Exec::Cpu(), {n});
  rng::Stream s(11);
  for (int64_t i = 0; i < n; ++i) {
    x.data_as<float>()[i] = static_cast<float>(s.Normal());
    y.data_as<float>()[i] = static_cast<float>(s.Normal());
  }
  std::vector<float> want(y.data_as<float>(), y.data_as<float>() + n);
  for (int64_t i = 0; i < n; ++i) want[i] += 0.5f * x.data_as<float>()[i];
  Axpy(Exec::Cpu(), 0.5f, x, y);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y.data_as<float>()[i], want[i]) << i;
  double chunked = 0;
  for (int64_t lo = 0; lo < n; lo += kParallelGrain) {
    double acc = 0;
    for (int64_t i = lo; i < std::min(n, lo + kParallelGrain); ++i) {
      acc += static_cast<double>(x.data_as<float>()[i]) * x.data_as<float>()[i];
    }
    chunked += acc;
  }
  EXPECT_EQ(SumSquares(Exec::Cpu(), x), chunked);
}

TEST(OpsTest, MatmulAllTransposesAndBatched) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int64_t b = 3, m = 5, k = 7, n = 4;
      Tensor a = Random(ta ? Shape{b, k, m} : Shape{b, m, k}, 1);
      Tensor bm = Random(tb ? Shape{b, n, k} : Shape{b, k, n}, 2);
      Tensor c = Random({b, m, n}, 3);
      std::vector<double> want = D(c), pa = D(a), pb = D(bm);
      for (int64_t z = 0; z < b; ++z)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (int64_t l = 0; l < k; ++l) {
              double x = ta ? pa[z * k * m + l * m + i] : pa[z * m * k + i * k + l];
              double y = tb ? pb[z * n * k + j * k + l] : pb[z * k * n + l * n + j];
              s += x * y;
            }
            double& w = want[z * m * n + i * n + j];
            w = 2.0 * s + 0.5 * w;
          }
      Matmul(kCpu, a, bm, c, ta, tb, 2.0f, 0.5f);
      ExpectNear(c, want, 1e-5);
    }
  }
}

// ex.matmul tf32 / bf16 on the CPU: the inputs rounded to nearest (ties to even) with 10 / 7
// mantissa bits, the products summed in fp32 (the same cases as CudaOpsTest's tensor cores).
TEST(OpsTest, MatmulRoundsItsInputsAtTf32AndBf16) {
  struct Case {
    MatmulPrecision p;
    double fine, coarse;  // C's entries for a = 1 + 2^-12 and a = 1 + 2^-9 (k = 64 of each)
    float tie, above_tie, odd_tie;  // 1 + half an ulp, a little more, and 1 + 3 half-ulps
    float tie_to, above_to, odd_to;  // what they round to
  };
  const Case cases[] = {
      {MatmulPrecision::kFp32, 64.015625, 64.125, 0, 0, 0, 0, 0, 0},
      {MatmulPrecision::kTf32, 64.0, 64.125, 1 + 0x1p-11f, 1 + 0x1p-11f + 0x1p-20f, 1 + 0x3p-11f, 1.0f,
       1 + 0x1p-10f, 1 + 0x1p-9f},
      {MatmulPrecision::kBf16, 64.0, 64.0, 1 + 0x1p-8f, 1 + 0x1p-8f + 0x1p-20f, 1 + 0x3p-8f, 1.0f, 1 + 0x1p-7f,
       1 + 0x1p-6f}};
  for (const Case& c : cases) {
    SCOPED_TRACE(MatmulPrecisionName(c.p));
    Exec ex = kCpu;
    ex.matmul = c.p;
    constexpr int64_t n = 128;
    Tensor a = NewZeros(kCpu, {n, n}), b = NewTensor(kCpu, {n, n}), out = NewTensor(kCpu, {n, n});
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < 64; ++j) a.data_as<float>()[i * n + j] = i < 64 ? 1.0f + 0x1p-12f : 1.0f + 0x1p-9f;
    }
    Fill(kCpu, b, 1.0f);
    Matmul(ex, a, b, out, false, false);
    EXPECT_EQ(out.data_as<float>()[0], c.fine);
    EXPECT_EQ(out.data_as<float>()[n * n - 1], c.coarse);
    if (c.p == MatmulPrecision::kFp32) continue;
    // 1x1 products with 1: the rounding itself. Infinity stays; the largest float rounds past
    // the largest bf16 / tf32 value to infinity.
    const float in[] = {c.tie, c.above_tie, c.odd_tie, -c.odd_tie, INFINITY, 3.4028235e38f};
    const float want[] = {c.tie_to, c.above_to, c.odd_to, -c.odd_to, INFINITY, INFINITY};
    for (size_t i = 0; i < std::size(in); ++i) {
      Tensor x = NewTensor(kCpu, {1, 1}), one = NewTensor(kCpu, {1, 1}), y = NewTensor(kCpu, {1, 1});
      x.data_as<float>()[0] = in[i];
      one.data_as<float>()[0] = 1.0f;
      Matmul(ex, x, one, y, false, false);
      EXPECT_EQ(y.data_as<float>()[0], want[i]) << "input " << in[i];
    }
    // Random inputs: each rounded input is off by at most half an ulp (2^-8 for bf16, 2^-11 for
    // tf32, relative), so each entry is within 2.01 u sum|x||w| (plus fp32's own sums) of the exact
    // product, and the inputs themselves are left as they were.
    const double u = c.p == MatmulPrecision::kBf16 ? 0x1p-8 : 0x1p-11;
    Tensor x = Random({33, 40}, 11), w = Random({40, 17}, 12), y = NewTensor(kCpu, {33, 17});
    const std::vector<double> xs = D(x), ws = D(w);
    Matmul(ex, x, w, y, false, false);
    EXPECT_EQ(D(x), xs);
    double worst = 0;
    for (int64_t i = 0; i < 33; ++i) {
      for (int64_t j = 0; j < 17; ++j) {
        double exact = 0, magnitude = 0;
        for (int64_t k = 0; k < 40; ++k) {
          exact += xs[i * 40 + k] * ws[k * 17 + j];
          magnitude += std::abs(xs[i * 40 + k] * ws[k * 17 + j]);
        }
        const double err = std::abs(y.data_as<float>()[i * 17 + j] - exact);
        worst = std::max(worst, err / ((2.01 * u + 40 * 0x1p-24) * magnitude));
      }
    }
    EXPECT_LE(worst, 1.0);
    EXPECT_GT(worst, 0.01);  // rounded: an fp32 product would sit far below the bound
  }
}

// An empty inner dimension is an empty sum (C = beta C); an empty output writes nothing.
TEST(OpsTest, EmptyMatmul) {
  Tensor a = NewTensor(kCpu, {5, 0}), b = NewTensor(kCpu, {0, 4}), c = Random({5, 4}, 4);
  std::vector<double> want = D(c);
  for (double& w : want) w *= 0.5;
  Matmul(kCpu, a, b, c, false, false, 1.0f, 0.5f);
  ExpectNear(c, want, 0);
  Tensor c0 = NewTensor(kCpu, {0, 4});
  Matmul(kCpu, NewTensor(kCpu, {0, 3}), Random({3, 4}, 5), c0, false, false);
  EXPECT_EQ(c0.numel(), 0);
}

TEST(OpsTest, LayerNormForwardBackward) {
  const int64_t n = 6, d = 10;
  Tensor x = Random({n, d}, 4), g = Random({d}, 5), b = Random({d}, 6), dy = Random({n, d}, 7);
  Tensor y = NewTensor(kCpu, {n, d}), mean = NewTensor(kCpu, {n}), rstd = NewTensor(kCpu, {n});
  LayerNorm(kCpu, x, g, b, 1e-5f, y, mean, rstd);
  Tensor dx = NewTensor(kCpu, {n, d}), dg = NewZeros(kCpu, {d}), db = NewZeros(kCpu, {d});
  LayerNormBackward(kCpu, dy, x, g, mean, rstd, dx, dg, db);
  auto px = D(x), pg = D(g), pb = D(b), pdy = D(dy);
  std::vector<double> wy(n * d), wdx(n * d), wdg(d, 0), wdb(d, 0);
  for (int64_t r = 0; r < n; ++r) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) mu += px[r * d + i] / d;
    for (int64_t i = 0; i < d; ++i) var += (px[r * d + i] - mu) * (px[r * d + i] - mu) / d;
    double rs = 1 / std::sqrt(var + 1e-5), s1 = 0, s2 = 0;
    for (int64_t i = 0; i < d; ++i) {
      double xh = (px[r * d + i] - mu) * rs;
      wy[r * d + i] = xh * pg[i] + pb[i];
      s1 += pdy[r * d + i] * pg[i] / d;
      s2 += pdy[r * d + i] * pg[i] * xh / d;
      wdg[i] += pdy[r * d + i] * xh;
      wdb[i] += pdy[r * d + i];
    }
    for (int64_t i = 0; i < d; ++i) {
      double xh = (px[r * d + i] - mu) * rs;
      wdx[r * d + i] = rs * (pdy[r * d + i] * pg[i] - s1 - xh * s2);
    }
  }
  ExpectNear(y, wy, 1e-5);
  ExpectNear(dx, wdx, 1e-4);
  ExpectNear(dg, wdg, 1e-5);
  ExpectNear(db, wdb, 1e-5);
  // The halves a split backward runs give the fused op's floats exactly.
  Tensor dx2 = NewTensor(kCpu, {n, d}), dg2 = NewZeros(kCpu, {d}), db2 = NewZeros(kCpu, {d});
  LayerNormBackwardInput(kCpu, dy, x, g, mean, rstd, dx2);
  LayerNormBackwardWeight(kCpu, dy, x, mean, rstd, dg2, db2);
  EXPECT_EQ(std::memcmp(dx.data(), dx2.data(), dx.nbytes()), 0);
  EXPECT_EQ(std::memcmp(dg.data(), dg2.data(), dg.nbytes()), 0);
  EXPECT_EQ(std::memcmp(db.data(), db2.data(), db.nbytes()), 0);
}

TEST(OpsTest, SoftmaxAndCrossEntropy) {
  const int64_t n = 5, v = 9;
  Tensor x = Random({n, v}, 8, 3.0f), y = NewTensor(kCpu, {n, v});
  Softmax(kCpu, x, y);
  Tensor targets = NewTensor(kCpu, {n}, DType::kI32);
  for (int64_t i = 0; i < n; ++i) targets.data_as<int32_t>()[i] = static_cast<int32_t>((i * 7) % v);
  targets.data_as<int32_t>()[2] = -1;  // ignored
  Tensor dl = NewTensor(kCpu, {n, v});
  double loss = CrossEntropy(kCpu, x, targets, dl);
  auto px = D(x);
  std::vector<double> wy(n * v), wd(n * v, 0.0);
  double wl = 0;
  for (int64_t r = 0; r < n; ++r) {
    double s = 0;
    for (int64_t i = 0; i < v; ++i) s += std::exp(px[r * v + i]);
    for (int64_t i = 0; i < v; ++i) wy[r * v + i] = std::exp(px[r * v + i]) / s;
    int t = targets.data_as<int32_t>()[r];
    if (t < 0) continue;
    wl += (std::log(s) - px[r * v + t]) / 4;
    for (int64_t i = 0; i < v; ++i) wd[r * v + i] = (wy[r * v + i] - (i == t)) / 4;
  }
  ExpectNear(y, wy, 1e-6);
  EXPECT_NEAR(loss, wl, 1e-5);
  ExpectNear(dl, wd, 1e-5);
}

TEST(OpsTest, CausalAttentionMatchesReference) {
  const int64_t b = 2, h = 3, t = 5, hd = 4;
  Tensor q = Random({b, h, t, hd}, 9), k = Random({b, h, t, hd}, 10), v = Random({b, h, t, hd}, 11);
  Tensor att = NewTensor(kCpu, {b, h, t, t}), out = NewTensor(kCpu, {b, h, t, hd});
  CausalAttention(kCpu, q, k, v, att, out);
  auto pq = D(q), pk = D(k), pv = D(v);
  std::vector<double> want(b * h * t * hd, 0.0);
  for (int64_t z = 0; z < b * h; ++z)
    for (int64_t i = 0; i < t; ++i) {
      std::vector<double> s(i + 1);
      double mx = -1e300, tot = 0;
      for (int64_t j = 0; j <= i; ++j) {
        for (int64_t l = 0; l < hd; ++l) s[j] += pq[(z * t + i) * hd + l] * pk[(z * t + j) * hd + l];
        s[j] /= std::sqrt(double(hd));
        mx = std::max(mx, s[j]);
      }
      for (auto& e : s) tot += (e = std::exp(e - mx));
      for (int64_t j = 0; j <= i; ++j)
        for (int64_t l = 0; l < hd; ++l) want[(z * t + i) * hd + l] += s[j] / tot * pv[(z * t + j) * hd + l];
    }
  ExpectNear(out, want, 1e-5);
}

// The head moves against their definition: q[b, h, s, :] is qkv's row b * t + s at columns
// h * hd of the first third (k the second, v the third); MergeHeads and SplitHeadsGrad are each
// other's inverse over [batch * t, heads * hd], MergeHeadsGrad is SplitHeads' transpose.
TEST(OpsTest, HeadMovesPlaceEveryElement) {
  const int64_t b = 2, h = 3, t = 4, hd = 5, c = h * hd;
  Tensor qkv = Random({b * t, 3 * c}, 21);
  const Shape heads{b, h, t, hd};
  Tensor q = NewTensor(kCpu, heads), k = NewTensor(kCpu, heads), v = NewTensor(kCpu, heads);
  SplitHeads(kCpu, qkv, b, h, q, k, v);
  const float* src = qkv.data_as<float>();
  const float* parts[3] = {q.data_as<float>(), k.data_as<float>(), v.data_as<float>()};
  for (int w = 0; w < 3; ++w)
    for (int64_t z = 0; z < b; ++z)
      for (int64_t head = 0; head < h; ++head)
        for (int64_t s = 0; s < t; ++s)
          for (int64_t d = 0; d < hd; ++d) {
            ASSERT_EQ(parts[w][((z * h + head) * t + s) * hd + d],
                      src[(z * t + s) * 3 * c + w * c + head * hd + d])
                << "part " << w << " batch " << z << " head " << head << " token " << s << " dim " << d;
          }
  Tensor back = NewTensor(kCpu, {b * t, 3 * c});
  MergeHeadsGrad(kCpu, q, k, v, back);
  EXPECT_EQ(std::memcmp(back.data_as<float>(), src, back.numel() * sizeof(float)), 0);
  Tensor merged = NewTensor(kCpu, {b * t, c}), split = NewTensor(kCpu, heads);
  MergeHeads(kCpu, q, merged);
  for (int64_t row = 0; row < b * t; ++row) {
    const float* got = merged.data_as<float>() + row * c;
    EXPECT_EQ(std::memcmp(got, src + row * 3 * c, c * sizeof(float)), 0) << "row " << row;
  }
  SplitHeadsGrad(kCpu, merged, split);
  EXPECT_EQ(std::memcmp(split.data_as<float>(), q.data_as<float>(), q.numel() * sizeof(float)), 0);
}

TEST(OpsTest, EmbeddingGatherScatterAndSparse) {
  Tensor table = Random({6, 3}, 12);
  Tensor ids = NewTensor(kCpu, {4}, DType::kI64);
  int64_t raw[] = {5, 1, 5, 0};
  for (int i = 0; i < 4; ++i) ids.data_as<int64_t>()[i] = raw[i];
  Tensor rows = NewTensor(kCpu, {4, 3});
  EmbeddingGather(kCpu, table, ids, rows);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(rows.data_as<float>()[i * 3 + j], table.data_as<float>()[raw[i] * 3 + j]);
  Tensor dtable = NewZeros(kCpu, {6, 3});
  EmbeddingScatterAdd(kCpu, rows, ids, dtable);
  EXPECT_FLOAT_EQ(dtable.data_as<float>()[5 * 3], 2 * table.data_as<float>()[5 * 3]);
  EXPECT_FLOAT_EQ(dtable.data_as<float>()[2 * 3], 0.0f);
  SparseRows sparse = EmbeddingSparseGrad(rows, ids);
  ASSERT_EQ(sparse.keys.numel(), 3);
  EXPECT_EQ(sparse.keys.data_as<int64_t>()[0], 0);
  EXPECT_EQ(sparse.keys.data_as<int64_t>()[2], 5);
  EXPECT_FLOAT_EQ(sparse.rows.data_as<float>()[2 * 3 + 1], dtable.data_as<float>()[5 * 3 + 1]);
}

TEST(OpsTest, DropoutIsSeededAndScaled) {
  Tensor x = NewTensor(kCpu, {10000});
  Fill(kCpu, x, 1.0f);
  Tensor y = NewTensor(kCpu, {10000}), y2 = NewTensor(kCpu, {10000});
  Dropout(kCpu, x, 0.25f, 42, y);
  Dropout(kCpu, x, 0.25f, 42, y2);
  int kept = 0;
  for (int i = 0; i < 10000; ++i) {
    EXPECT_EQ(y.data_as<float>()[i], y2.data_as<float>()[i]);
    if (y.data_as<float>()[i] != 0) {
      ++kept;
      EXPECT_FLOAT_EQ(y.data_as<float>()[i], 1.0f / 0.75f);
    }
  }
  EXPECT_NEAR(kept / 10000.0, 0.75, 0.02);
}

TEST(OpsTest, AdamWAndSgdMatchFormulas) {
  Tensor w = Random({5}, 13), g = Random({5}, 14), m = NewZeros(kCpu, {5}), v = NewZeros(kCpu, {5});
  auto w0 = D(w), pg = D(g);
  AdamWUpdate(kCpu, w, g, m, v, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
  for (int i = 0; i < 5; ++i) {
    double mh = pg[i], vh = pg[i] * pg[i];  // bias-corrected first step
    double want = w0[i] - 0.1 * (mh / (std::sqrt(vh) + 1e-8) + 0.01 * w0[i]);
    EXPECT_NEAR(w.data_as<float>()[i], want, 1e-5);
  }
  Tensor w2 = Random({5}, 15), mom = NewZeros(kCpu, {5});
  auto w20 = D(w2);
  SgdUpdate(kCpu, w2, g, mom, 0.5f, 0.9f, 0.0f, false);
  SgdUpdate(kCpu, w2, g, mom, 0.5f, 0.9f, 0.0f, false);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(w2.data_as<float>()[i], w20[i] - 0.5 * pg[i] * (1 + 1.9), 1e-5);
}

TEST(OpsTest, GeluAndReluBackwardMatchFiniteDifferences) {
  Tensor x = Random({64}, 16, 2.0f), ones = NewTensor(kCpu, {64}), dx = NewTensor(kCpu, {64});
  Fill(kCpu, ones, 1.0f);
  GeluBackward(kCpu, x, ones, dx);
  auto gelu = [](double v) { return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); };
  for (int i = 0; i < 64; ++i) {
    double v = x.data_as<float>()[i];
    EXPECT_NEAR(dx.data_as<float>()[i], (gelu(v + 1e-6) - gelu(v - 1e-6)) / 2e-6, 1e-4);
  }
  ReluBackward(kCpu, x, ones, dx);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(dx.data_as<float>()[i], x.data_as<float>()[i] > 0 ? 1.0f : 0.0f);
}

TEST(OpsTest, CastRoundTrips) {
  Tensor x = Random({100}, 17);
  for (DType d : {DType::kBF16, DType::kF16}) {
    Tensor h = NewTensor(kCpu, {100}, d), back = NewTensor(kCpu, {100});
    Cast(kCpu, x, h);
    Cast(kCpu, h, back);
    const double tol = d == DType::kBF16 ? 1.0 / 128 : 1.0 / 1024;
    ExpectNear(back, D(x), tol);
  }
}

TEST(OpsTest, BceAndMse) {
  Tensor z = Random({8}, 18), y = NewTensor(kCpu, {8}), d = NewTensor(kCpu, {8});
  for (int i = 0; i < 8; ++i) y.data_as<float>()[i] = i % 2;
  double loss = BceWithLogits(kCpu, z, y, d);
  double want = 0;
  for (int i = 0; i < 8; ++i) {
    double p = 1 / (1 + std::exp(-double(z.data_as<float>()[i])));
    want += -(i % 2 ? std::log(p) : std::log(1 - p)) / 8;
    EXPECT_NEAR(d.data_as<float>()[i], (p - i % 2) / 8, 1e-6);
  }
  EXPECT_NEAR(loss, want, 1e-6);
  Tensor t = Random({8}, 19);
  EXPECT_NEAR(Mse(kCpu, z, t, d), [&] {
    double s = 0;
    for (int i = 0; i < 8; ++i) s += std::pow(double(z.data_as<float>()[i]) - t.data_as<float>()[i], 2);
    return s / 8;
  }(), 1e-6);
}

}  // namespace
}  // namespace strata::ops
