// tp_ops.cc: the ops of a vocabulary split over tensor-parallel ranks (ops.h, "Tensor
// parallelism"): the embedding's masked gather and scatter, and the three passes of the
// vocab-parallel cross-entropy. CPU here; CUDA in cuda_tp_ops.cu.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "trainer/ops/op_helpers.h"
#include "trainer/ops/ops.h"
#if STRATA_HAVE_CUDA
#include "trainer/ops/cuda_ops.h"
#endif

namespace strata::ops {

using namespace internal;  // NOLINT: F, W, Rows, Cols, IdAt, CheckF32

namespace {
void CheckRowVector(const Tensor& t, int64_t rows, const char* what) {
  CheckF32(t, what);
  STRATA_CHECK(t.numel() == rows) << what << ": " << t.numel() << " values for " << rows << " rows";
}
}  // namespace

void TransposeLeading(const Exec& ex, const Tensor& in, int64_t a, int64_t b, const Tensor& out) {
  CheckF32(in, "transpose input");
  CheckF32(out, "transpose output");
  STRATA_CHECK(in.numel() == out.numel() && a > 0 && b > 0 && in.numel() % (a * b) == 0)
      << "transpose of " << ShapeToString(in.shape()) << " as [" << a << ", " << b << ", ...]";
  STRATA_DISPATCH(in, TransposeLeading(ex, in, a, b, out));
  const int64_t r = in.numel() / (a * b);
  for (int64_t i = 0; i < a; ++i) {
    for (int64_t j = 0; j < b; ++j) std::memcpy(W(out) + (j * a + i) * r, F(in) + (i * b + j) * r, r * sizeof(float));
  }
}

void EmbeddingGatherRange(const Exec& ex, const Tensor& table, const Tensor& ids, int64_t first,
                          const Tensor& rows) {
  CheckF32(table, "embedding table");
  STRATA_CHECK(ids.dtype() == DType::kI32 || ids.dtype() == DType::kI64) << "ids: i32 or i64";
  const int64_t n = ids.numel(), d = table.size(1), slice = table.size(0);
  STRATA_CHECK(rows.shape() == (Shape{n, d})) << "embedding rows " << ShapeToString(rows.shape());
  STRATA_DISPATCH(table, EmbeddingGatherRange(ex, table, ids, first, rows));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = IdAt(ids, i) - first;
    if (id >= 0 && id < slice) {
      std::memcpy(W(rows) + i * d, F(table) + id * d, d * sizeof(float));
    } else {
      std::memset(W(rows) + i * d, 0, d * sizeof(float));
    }
  }
}

void EmbeddingScatterAddRange(const Exec& ex, const Tensor& drows, const Tensor& ids,
                              int64_t first, const Tensor& dtable) {
  CheckF32(dtable, "embedding dtable");
  const int64_t n = ids.numel(), d = dtable.size(1), slice = dtable.size(0);
  STRATA_CHECK(drows.shape() == (Shape{n, d})) << "embedding drows";
  STRATA_DISPATCH(dtable, EmbeddingScatterAddRange(ex, drows, ids, first, dtable));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = IdAt(ids, i) - first;
    if (id < 0 || id >= slice) continue;
    float* dst = W(dtable) + id * d;
    const float* src = F(drows) + i * d;
    for (int64_t j = 0; j < d; ++j) dst[j] += src[j];
  }
}

void VocabLogitStats(const Exec& ex, const Tensor& logits, const Tensor& targets, int64_t first,
                     const Tensor& row_max, const Tensor& target_logit) {
  CheckF32(logits, "vocab logits");
  const int64_t n = Rows(logits), v = Cols(logits);
  STRATA_CHECK(targets.numel() == n && targets.dtype() == DType::kI32) << "targets: i32 [N]";
  CheckRowVector(row_max, n, "row_max");
  CheckRowVector(target_logit, n, "target_logit");
  STRATA_DISPATCH(logits, VocabLogitStats(ex, logits, targets, first, row_max, target_logit));
  const int32_t* pt = targets.data_as<int32_t>();
  for (int64_t r = 0; r < n; ++r) {
    const float* x = F(logits) + r * v;
    float mx = -INFINITY;
    for (int64_t j = 0; j < v; ++j) mx = std::max(mx, x[j]);
    W(row_max)[r] = mx;
    const int64_t t = pt[r] - first;
    W(target_logit)[r] = pt[r] >= 0 && t >= 0 && t < v ? x[t] : 0.0f;
  }
}

void VocabSumExp(const Exec& ex, const Tensor& logits, const Tensor& row_max,
                 const Tensor& sum_exp) {
  CheckF32(logits, "vocab logits");
  const int64_t n = Rows(logits), v = Cols(logits);
  CheckRowVector(row_max, n, "row_max");
  CheckRowVector(sum_exp, n, "sum_exp");
  STRATA_DISPATCH(logits, VocabSumExp(ex, logits, row_max, sum_exp));
  for (int64_t r = 0; r < n; ++r) {
    const float* x = F(logits) + r * v;
    const float mx = F(row_max)[r];
    double s = 0;
    for (int64_t j = 0; j < v; ++j) s += std::exp(x[j] - mx);
    W(sum_exp)[r] = static_cast<float>(s);
  }
}

void VocabCrossEntropyGrad(const Exec& ex, const Tensor& logits, const Tensor& targets,
                           int64_t first, const Tensor& row_max, const Tensor& sum_exp, float g,
                           const Tensor& dlogits) {
  CheckF32(logits, "vocab logits");
  CheckSame(logits, dlogits, "vocab cross-entropy");
  const int64_t n = Rows(logits), v = Cols(logits);
  STRATA_CHECK(targets.numel() == n && targets.dtype() == DType::kI32) << "targets: i32 [N]";
  CheckRowVector(row_max, n, "row_max");
  CheckRowVector(sum_exp, n, "sum_exp");
  STRATA_DISPATCH(logits, VocabCrossEntropyGrad(ex, logits, targets, first, row_max, sum_exp, g, dlogits));
  const int32_t* pt = targets.data_as<int32_t>();
  for (int64_t r = 0; r < n; ++r) {
    const float* x = F(logits) + r * v;
    float* d = W(dlogits) + r * v;
    if (pt[r] < 0) {
      std::fill_n(d, v, 0.0f);
      continue;
    }
    const float mx = F(row_max)[r], inv = 1.0f / F(sum_exp)[r];
    for (int64_t j = 0; j < v; ++j) d[j] = std::exp(x[j] - mx) * inv * g;
    const int64_t t = pt[r] - first;
    if (t >= 0 && t < v) d[t] -= g;
  }
}

}  // namespace strata::ops
