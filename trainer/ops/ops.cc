// ops.cc: the CPU implementations of ops.h (the reference the CUDA ops are tested against) and
// the dispatch to cuda_ops.cu for CUDA tensors.
#include "trainer/ops/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "common/optim/kernels.h"
#include "trainer/ops/op_helpers.h"
#include "trainer/ops/parallel.h"
#include "trainer/ops/rng.h"

namespace strata::ops {

using internal::SoftmaxBackwardRow;
using internal::SoftmaxRow;
using internal::CheckF32;
using internal::CheckSame;
using internal::Cols;
using internal::F;
using internal::IdAt;
using internal::Rows;
using internal::W;

const char* MatmulPrecisionName(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::kFp32: return "fp32";
    case MatmulPrecision::kTf32: return "tf32";
    case MatmulPrecision::kBf16: return "bf16";
  }
  return "?";
}

Result<MatmulPrecision> ParseMatmulPrecision(std::string_view name) {
  for (MatmulPrecision p : {MatmulPrecision::kFp32, MatmulPrecision::kTf32, MatmulPrecision::kBf16}) {
    if (name == MatmulPrecisionName(p)) return p;
  }
  return Status::InvalidArgument("matmul precision \"" + std::string(name) + "\": expected fp32, tf32 or bf16");
}

Tensor NewTensor(const Exec& ex, Shape shape, DType dtype) {
  Result<Tensor> t = Tensor::Empty(shape, dtype, ex.alloc());  // `shape` kept for the message
  if (!t.ok() && t.status().code() == StatusCode::kResourceExhausted) {
    throw OutOfMemory(t.status().WithContext("a " + ShapeToString(shape) + " tensor on " + ex.device.ToString()));
  }
  STRATA_CHECK(t.ok()) << t.status().ToString();
  return *std::move(t);
}

Tensor NewZeros(const Exec& ex, Shape shape, DType dtype) {
  Tensor t = NewTensor(ex, std::move(shape), dtype);
  if (dtype == DType::kF32) {
    Fill(ex, t, 0.0f);
  } else {
    STRATA_CHECK(t.is_cpu()) << "NewZeros of a non-f32 CUDA tensor";
    std::memset(t.data(), 0, t.nbytes());
  }
  return t;
}

// --- Elementwise and reductions

namespace {

// Sum of term(i) over [0, n): per-chunk partials summed in chunk order, so the result does not
// depend on the number of threads.
template <typename Term>
double ChunkedSum(int64_t n, Term term) {
  const int64_t chunks = (n + kParallelGrain - 1) / kParallelGrain;
  std::vector<double> partial(static_cast<size_t>(std::max<int64_t>(chunks, 1)), 0.0);
  ParallelFor(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    double acc = 0;
    for (int64_t i = lo; i < hi; ++i) acc += term(i);
    partial[static_cast<size_t>(lo / kParallelGrain)] = acc;
  });
  double s = 0;
  for (double v : partial) s += v;
  return s;
}

}  // namespace

void Fill(const Exec& ex, const Tensor& x, float value) {
  CheckF32(x, "fill");
  STRATA_DISPATCH(x, Fill(ex, x, value));
  float* p = W(x);
  ParallelFor(x.numel(), kParallelGrain, [&](int64_t lo, int64_t hi) { std::fill(p + lo, p + hi, value); });
}

void Copy(const Exec& ex, const Tensor& src, const Tensor& dst) {
  CheckSame(src, dst, "copy");
  STRATA_CHECK(src.dtype() == dst.dtype() && src.device() == dst.device()) << "copy mismatch";
  STRATA_DISPATCH(src, Copy(ex, src, dst));
  Tensor out = dst;
  STRATA_CHECK_OK(out.CopyFrom(src));
}

void Add(const Exec& ex, const Tensor& a, const Tensor& b, const Tensor& out) {
  CheckF32(a, "add a");
  CheckSame(a, b, "add");
  CheckSame(a, out, "add");
  STRATA_DISPATCH(a, Add(ex, a, b, out));
  const int64_t n = a.numel();
  const float *pa = F(a), *pb = F(b);
  float* po = W(out);
  ParallelFor(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) po[i] = pa[i] + pb[i];
  });
}

void Mul(const Exec& ex, const Tensor& a, const Tensor& b, const Tensor& out) {
  CheckF32(a, "mul a");
  CheckSame(a, b, "mul");
  CheckSame(a, out, "mul");
  STRATA_DISPATCH(a, Mul(ex, a, b, out));
  const int64_t n = a.numel();
  const float *pa = F(a), *pb = F(b);
  float* po = W(out);
  ParallelFor(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) po[i] = pa[i] * pb[i];
  });
}

void Scale(const Exec& ex, const Tensor& x, float alpha) {
  CheckF32(x, "scale");
  STRATA_DISPATCH(x, Scale(ex, x, alpha));
  const int64_t n = x.numel();
  float* p = W(x);
  ParallelFor(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) p[i] *= alpha;
  });
}

void Axpy(const Exec& ex, float alpha, const Tensor& x, const Tensor& y) {
  CheckF32(x, "axpy x");
  CheckSame(x, y, "axpy");
  STRATA_DISPATCH(x, Axpy(ex, alpha, x, y));
  const int64_t n = x.numel();
  const float* px = F(x);
  float* py = W(y);
  ParallelFor(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) py[i] += alpha * px[i];
  });
}

double Sum(const Exec& ex, const Tensor& x) {
  CheckF32(x, "sum");
  STRATA_DISPATCH(x, Sum(ex, x));
  const float* p = F(x);
  return ChunkedSum(x.numel(), [p](int64_t i) { return static_cast<double>(p[i]); });
}

double SumSquares(const Exec& ex, const Tensor& x) {
  CheckF32(x, "sum_squares");
  STRATA_DISPATCH(x, SumSquares(ex, x));
  const float* p = F(x);
  return ChunkedSum(x.numel(), [p](int64_t i) { return static_cast<double>(p[i]) * p[i]; });
}

void AddBias(const Exec& ex, const Tensor& x, const Tensor& bias) {
  CheckF32(x, "add_bias x");
  CheckF32(bias, "add_bias bias");
  STRATA_CHECK(bias.numel() == Cols(x)) << "bias " << ShapeToString(bias.shape());
  STRATA_DISPATCH(x, AddBias(ex, x, bias));
  const int64_t rows = Rows(x), cols = Cols(x);
  float* px = W(x);
  const float* pb = F(bias);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) px[r * cols + c] += pb[c];
  }
}

void BiasGrad(const Exec& ex, const Tensor& dy, const Tensor& db) {
  CheckF32(dy, "bias_grad dy");
  CheckF32(db, "bias_grad db");
  STRATA_CHECK(db.numel() == Cols(dy)) << "db " << ShapeToString(db.shape());
  STRATA_DISPATCH(dy, BiasGrad(ex, dy, db));
  const int64_t rows = Rows(dy), cols = Cols(dy);
  std::vector<double> acc(cols, 0.0);
  const float* p = F(dy);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) acc[c] += p[r * cols + c];
  }
  float* pdb = W(db);
  for (int64_t c = 0; c < cols; ++c) pdb[c] += static_cast<float>(acc[c]);
}

// --- Activations

void Relu(const Exec& ex, const Tensor& x, const Tensor& y) {
  CheckF32(x, "relu");
  CheckSame(x, y, "relu");
  STRATA_DISPATCH(x, Relu(ex, x, y));
  const int64_t n = x.numel();
  const float* px = F(x);
  float* py = W(y);
  ParallelFor(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) py[i] = px[i] > 0 ? px[i] : 0.0f;
  });
}

void ReluBackward(const Exec& ex, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  CheckF32(x, "relu_backward");
  CheckSame(x, dy, "relu_backward");
  CheckSame(x, dx, "relu_backward");
  STRATA_DISPATCH(x, ReluBackward(ex, x, dy, dx));
  const int64_t n = x.numel();
  const float *px = F(x), *pdy = F(dy);
  float* pdx = W(dx);
  ParallelFor(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) pdx[i] = px[i] > 0 ? pdy[i] : 0.0f;
  });
}

namespace {
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluC = 0.044715f;

// tanh as a branch-free rational minimax approximation (the form Eigen uses), so GELU's loops
// vectorise: within 3.3e-7 of std::tanh over all floats (|x| > 7.9 saturates to +-1).
inline float FastTanh(float x) {
  constexpr float kMax = 7.90531110763549805f;
  // Selects on values (not std::min's references), which the vectoriser turns into blends.
  float c = x > kMax ? kMax : x;
  c = c < -kMax ? -kMax : c;
  const float x2 = c * c;
  float p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
  p = x2 * p + -8.60467152213735e-11f;
  p = x2 * p + 5.12229709037114e-08f;
  p = x2 * p + 1.48572235717979e-05f;
  p = x2 * p + 6.37261928875436e-04f;
  p = x2 * p + 4.89352455891786e-03f;
  p = c * p;
  float q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = x2 * q + 2.26843463243900e-03f;
  q = x2 * q + 4.89352518554385e-03f;
  return p / q;
}
}  // namespace

void Gelu(const Exec& ex, const Tensor& x, const Tensor& y) {
  CheckF32(x, "gelu");
  CheckSame(x, y, "gelu");
  STRATA_DISPATCH(x, Gelu(ex, x, y));
  const int64_t n = x.numel();
  const float* px = F(x);
  float* py = W(y);
  ParallelFor(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float v = px[i];
      py[i] = 0.5f * v * (1.0f + FastTanh(kGeluK * (v + kGeluC * v * v * v)));
    }
  });
}

void GeluBackward(const Exec& ex, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  CheckF32(x, "gelu_backward");
  CheckSame(x, dy, "gelu_backward");
  CheckSame(x, dx, "gelu_backward");
  STRATA_DISPATCH(x, GeluBackward(ex, x, dy, dx));
  const int64_t n = x.numel();
  const float *px = F(x), *pdy = F(dy);
  float* pdx = W(dx);
  ParallelFor(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float v = px[i];
      const float t = FastTanh(kGeluK * (v + kGeluC * v * v * v));
      const float d = 0.5f * (1.0f + t) +
                      0.5f * v * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluC * v * v);
      pdx[i] = pdy[i] * d;
    }
  });
}

// --- Softmax

namespace {
// exp as Cody-Waite range reduction plus Cephes' degree-5 polynomial, branch-free so the row
// loops vectorise: e^x = 2^n e^r with n = round(x / ln 2), |r| <= ln 2 / 2; within 1 ulp of
// std::exp for x in [-87.3, 88.7], the inputs clamped to that range (so e^x never reaches 0 or
// inf: softmax inputs are x - max <= 0, and e^-87.3 ~ 1e-38 adds nothing to a row's sum).
inline float FastExp(float x) {
  constexpr float kHi = 88.3762626647949f, kLo = -87.3365447504019f;
  float c = x > kHi ? kHi : x;
  c = c < kLo ? kLo : c;
  // Round to nearest by the 1.5 * 2^23 trick: adding it leaves n in the low mantissa bits.
  constexpr float kMagic = 12582912.0f;
  const float t = c * 1.44269504088896341f + kMagic;
  int32_t n;
  std::memcpy(&n, &t, sizeof n);
  n -= 0x4B400000;
  const float fn = t - kMagic;
  const float r = c - fn * 0.693359375f - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  const int32_t bits = (n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return er * scale;
}

}  // namespace

// y = softmax(x) over n entries; returns log(sum(exp(x))) (the row's log-partition).
double internal::SoftmaxRow(const float* x, float* y, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  for (int64_t i = 0; i < n; ++i) y[i] = FastExp(x[i] - mx);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += y[i];
  const float inv = static_cast<float>(1.0 / s);
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  return std::log(s) + mx;
}

void internal::SoftmaxBackwardRow(const float* y, const float* dy, float* dx, int64_t n) {
  double dot = 0;
  for (int64_t i = 0; i < n; ++i) dot += static_cast<double>(y[i]) * dy[i];
  const float d = static_cast<float>(dot);
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] * (dy[i] - d);
}

void Softmax(const Exec& ex, const Tensor& x, const Tensor& y) {
  CheckF32(x, "softmax");
  CheckSame(x, y, "softmax");
  STRATA_DISPATCH(x, Softmax(ex, x, y));
  const int64_t rows = Rows(x), d = Cols(x);
  for (int64_t r = 0; r < rows; ++r) SoftmaxRow(F(x) + r * d, W(y) + r * d, d);
}

void SoftmaxBackward(const Exec& ex, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  CheckF32(y, "softmax_backward");
  CheckSame(y, dy, "softmax_backward");
  CheckSame(y, dx, "softmax_backward");
  STRATA_DISPATCH(y, SoftmaxBackward(ex, y, dy, dx));
  const int64_t rows = Rows(y), d = Cols(y);
  for (int64_t r = 0; r < rows; ++r) SoftmaxBackwardRow(F(y) + r * d, F(dy) + r * d, W(dx) + r * d, d);
}

// --- Losses

double CrossEntropy(const Exec& ex, const Tensor& logits, const Tensor& targets,
                    const Tensor& dlogits, float grad_scale) {
  CheckF32(logits, "cross_entropy logits");
  CheckSame(logits, dlogits, "cross_entropy");
  const int64_t n = Rows(logits), v = Cols(logits);
  STRATA_CHECK(targets.numel() == n && targets.dtype() == DType::kI32) << "targets: i32 [N]";
  STRATA_DISPATCH(logits, CrossEntropy(ex, logits, targets, dlogits, grad_scale));
  const int32_t* pt = targets.data_as<int32_t>();
  int64_t count = 0;
  for (int64_t r = 0; r < n; ++r) count += pt[r] >= 0;
  const float g = count ? grad_scale / count : 0.0f;
  double total = 0;
  for (int64_t r = 0; r < n; ++r) {
    const float* x = F(logits) + r * v;
    float* d = W(dlogits) + r * v;
    if (pt[r] < 0) {
      std::fill_n(d, v, 0.0f);
      continue;
    }
    STRATA_CHECK(pt[r] < v) << "target " << pt[r] << " >= vocab " << v;
    total += SoftmaxRow(x, d, v) - x[pt[r]];
    for (int64_t i = 0; i < v; ++i) d[i] *= g;
    d[pt[r]] -= g;
  }
  return count ? total / count : 0.0;
}

double Mse(const Exec& ex, const Tensor& pred, const Tensor& target, const Tensor& dpred,
           float grad_scale) {
  CheckF32(pred, "mse pred");
  CheckSame(pred, target, "mse");
  CheckSame(pred, dpred, "mse");
  STRATA_DISPATCH(pred, Mse(ex, pred, target, dpred, grad_scale));
  const int64_t n = pred.numel();
  const float *pp = F(pred), *pt = F(target);
  float* pd = W(dpred);
  const float g = 2.0f * grad_scale / n;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float e = pp[i] - pt[i];
    total += static_cast<double>(e) * e;
    pd[i] = g * e;
  }
  return total / n;
}

double BceWithLogits(const Exec& ex, const Tensor& logits, const Tensor& labels,
                     const Tensor& dlogits, float grad_scale) {
  CheckF32(logits, "bce logits");
  CheckF32(labels, "bce labels");
  STRATA_CHECK(logits.numel() == labels.numel() && logits.numel() == dlogits.numel())
      << "bce sizes";
  STRATA_DISPATCH(logits, BceWithLogits(ex, logits, labels, dlogits, grad_scale));
  const int64_t n = logits.numel();
  const float *pz = F(logits), *py = F(labels);
  float* pd = W(dlogits);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double z = pz[i], y = py[i];
    total += std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::abs(z)));
    pd[i] = static_cast<float>((1.0 / (1.0 + std::exp(-z)) - y) * grad_scale / n);
  }
  return total / n;
}

// --- Embeddings

void EmbeddingGather(const Exec& ex, const Tensor& table, const Tensor& ids, const Tensor& rows) {
  CheckF32(table, "embedding table");
  STRATA_CHECK(ids.dtype() == DType::kI32 || ids.dtype() == DType::kI64) << "ids: i32 or i64";
  const int64_t n = ids.numel(), d = table.size(1), vocab = table.size(0);
  STRATA_CHECK(rows.shape() == (Shape{n, d})) << "embedding rows " << ShapeToString(rows.shape());
  STRATA_DISPATCH(table, EmbeddingGather(ex, table, ids, rows));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = IdAt(ids, i);
    STRATA_CHECK(id >= 0 && id < vocab) << "id " << id << " outside [0, " << vocab << ")";
    std::memcpy(W(rows) + i * d, F(table) + id * d, d * sizeof(float));
  }
}

void EmbeddingScatterAdd(const Exec& ex, const Tensor& drows, const Tensor& ids,
                         const Tensor& dtable) {
  CheckF32(dtable, "embedding dtable");
  const int64_t n = ids.numel(), d = dtable.size(1), vocab = dtable.size(0);
  STRATA_CHECK(drows.shape() == (Shape{n, d})) << "embedding drows";
  STRATA_DISPATCH(dtable, EmbeddingScatterAdd(ex, drows, ids, dtable));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = IdAt(ids, i);
    STRATA_CHECK(id >= 0 && id < vocab) << "id " << id << " outside [0, " << vocab << ")";
    float* dst = W(dtable) + id * d;
    const float* src = F(drows) + i * d;
    for (int64_t j = 0; j < d; ++j) dst[j] += src[j];
  }
}

SparseRows EmbeddingSparseGrad(const Tensor& drows, const Tensor& ids) {
  CheckF32(drows, "sparse_grad drows");
  STRATA_CHECK(drows.is_cpu() && ids.is_cpu()) << "EmbeddingSparseGrad is CPU only";
  const int64_t n = ids.numel(), d = drows.size(1);
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return IdAt(ids, a) < IdAt(ids, b); });
  int64_t unique = 0;
  for (int64_t i = 0; i < n; ++i) unique += (i == 0 || IdAt(ids, order[i]) != IdAt(ids, order[i - 1]));
  const Exec cpu = Exec::Cpu();
  SparseRows out{NewTensor(cpu, {unique}, DType::kI64), NewZeros(cpu, {unique, d})};
  int64_t u = -1;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = IdAt(ids, order[i]);
    if (i == 0 || id != IdAt(ids, order[i - 1])) out.keys.data_as<int64_t>()[++u] = id;
    float* dst = W(out.rows) + u * d;
    const float* src = F(drows) + order[i] * d;
    for (int64_t j = 0; j < d; ++j) dst[j] += src[j];
  }
  return out;
}

// --- Dropout

void Dropout(const Exec& ex, const Tensor& x, float p, uint64_t seed, const Tensor& y) {
  CheckF32(x, "dropout");
  CheckSame(x, y, "dropout");
  STRATA_CHECK(p >= 0.0f && p < 1.0f) << "dropout p " << p;
  STRATA_DISPATCH(x, Dropout(ex, x, p, seed, y));
  const int64_t n = x.numel();
  const float scale = 1.0f / (1.0f - p);
  for (int64_t i = 0; i < n; ++i) y.data_as<float>()[i] = rng::Uniform(seed, i) >= p ? F(x)[i] * scale : 0.0f;
}

void DropoutBackward(const Exec& ex, const Tensor& dy, float p, uint64_t seed, const Tensor& dx) {
  Dropout(ex, dy, p, seed, dx);  // the same mask and scale: the op is linear in its input
}

// --- Optimizers

// Both run the shared CPU kernels (common/optim/kernels.h) on the ops' pool: the same kernels
// the parameter servers apply, with the formulas these ops always had (the CUDA kernels in
// cuda_ops.cu compute the same ones).
void SgdUpdate(const Exec& ex, const Tensor& w, const Tensor& g, const Tensor& v, float lr,
               float momentum, float weight_decay, bool nesterov) {
  CheckF32(w, "sgd w");
  CheckSame(w, g, "sgd");
  CheckSame(w, v, "sgd");
  STRATA_DISPATCH(w, SgdUpdate(ex, w, g, v, lr, momentum, weight_decay, nesterov));
  optim::SgdStep({.lr = lr, .momentum = momentum, .weight_decay = weight_decay, .nesterov = nesterov},
                 {.w = W(w), .m = W(v), .grad = F(g), .n = w.numel()},
                 {.pool = &OpsThreadPool(), .grain = kParallelGrain});
}

void AdamWUpdate(const Exec& ex, const Tensor& w, const Tensor& g, const Tensor& m,
                 const Tensor& v, float lr, float beta1, float beta2, float eps,
                 float weight_decay, int64_t t) {
  CheckF32(w, "adamw w");
  CheckSame(w, g, "adamw");
  CheckSame(w, m, "adamw");
  CheckSame(w, v, "adamw");
  STRATA_CHECK(t >= 1) << "adamw step " << t;
  STRATA_DISPATCH(w, AdamWUpdate(ex, w, g, m, v, lr, beta1, beta2, eps, weight_decay, t));
  optim::AdamStep({.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .decoupled = weight_decay, .step = t},
                  {.w = W(w), .m = W(m), .v = W(v), .grad = F(g), .n = w.numel()},
                  {.pool = &OpsThreadPool(), .grain = kParallelGrain});
}

// --- Casts

void Cast(const Exec& ex, const Tensor& src, const Tensor& dst) {
  CheckSame(src, dst, "cast");
  STRATA_CHECK(src.is_contiguous() && dst.is_contiguous()) << "cast wants contiguous tensors";
  STRATA_DISPATCH(src, Cast(ex, src, dst));
  const size_t n = static_cast<size_t>(src.numel());
  const DType s = src.dtype(), d = dst.dtype();
  if (s == d) {
    std::memcpy(dst.data(), src.data(), src.nbytes());
  } else if (s == DType::kF32 && d == DType::kBF16) {
    ConvertF32ToBF16(F(src), dst.data_as<uint16_t>(), n);
  } else if (s == DType::kF32 && d == DType::kF16) {
    ConvertF32ToF16(F(src), dst.data_as<uint16_t>(), n);
  } else if (s == DType::kBF16 && d == DType::kF32) {
    ConvertBF16ToF32(src.data_as<uint16_t>(), W(dst), n);
  } else if (s == DType::kF16 && d == DType::kF32) {
    ConvertF16ToF32(src.data_as<uint16_t>(), W(dst), n);
  } else {
    STRATA_CHECK(false) << "cast " << s << " -> " << d << " is not supported";
  }
}

}  // namespace strata::ops

namespace strata::rng {

double Stream::Normal() {
  const double u1 = Uniform(), u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace strata::rng
