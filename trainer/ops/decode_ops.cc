// decode_ops.cc: the ops of incremental decoding (ops.h, "Generation"): appending new keys
// and values into a KV cache at each row's position, and attention of new queries over a row's
// cached prefix. CPU only for now: on a CUDA tensor they fail naming the op.
#include <algorithm>
#include <cmath>
#include <vector>

#include <cblas.h>

#include "trainer/ops/op_helpers.h"
#include "trainer/ops/ops.h"

namespace strata::ops {

using namespace internal;  // NOLINT: F, W, CheckF32, SoftmaxRow

namespace {

void CheckCache(const Tensor& x, const Tensor& cache, const std::vector<int64_t>& starts, const char* what) {
  CheckF32(x, what);
  CheckF32(cache, what);
  STRATA_CHECK(x.is_cpu()) << what << ": generation runs on the CPU only (not built for CUDA yet)";
  STRATA_CHECK(x.dim() == 4 && cache.dim() == 4 && x.size(0) == cache.size(0) && x.size(1) == cache.size(1) &&
               x.size(3) == cache.size(3))
      << what << ": new " << ShapeToString(x.shape()) << " against cache " << ShapeToString(cache.shape());
  STRATA_CHECK(static_cast<int64_t>(starts.size()) == x.size(0)) << what << ": " << starts.size() << " starts for "
                                                                 << x.size(0) << " rows";
  for (int64_t s : starts) {
    STRATA_CHECK(s >= 0 && s + x.size(2) <= cache.size(2))
        << what << ": positions " << s << " + " << x.size(2) << " past the cache's " << cache.size(2)
        << " (the model's context)";
  }
}

}  // namespace

void KvAppend(const Exec& /*ex*/, const Tensor& k, const Tensor& v, const Tensor& kcache, const Tensor& vcache,
              const std::vector<int64_t>& starts) {
  CheckCache(k, kcache, starts, "kv append (keys)");
  CheckCache(v, vcache, starts, "kv append (values)");
  const int64_t b = k.size(0), h = k.size(1), n = k.size(2), hd = k.size(3), cap = kcache.size(2);
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t j = 0; j < h; ++j) {
      const int64_t src = (r * h + j) * n * hd, dst = ((r * h + j) * cap + starts[r]) * hd;
      std::copy_n(F(k) + src, n * hd, W(kcache) + dst);
      std::copy_n(F(v) + src, n * hd, W(vcache) + dst);
    }
  }
}

void CachedAttention(const Exec& /*ex*/, const Tensor& q, const Tensor& kcache, const Tensor& vcache,
                     const std::vector<int64_t>& starts, const Tensor& out) {
  CheckCache(q, kcache, starts, "cached attention");
  CheckCache(q, vcache, starts, "cached attention");
  CheckF32(out, "cached attention out");
  STRATA_CHECK(out.shape() == q.shape()) << "cached attention out " << ShapeToString(out.shape());
  const int64_t b = q.size(0), h = q.size(1), n = q.size(2), hd = q.size(3), cap = kcache.size(2);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Per (row, head): scores of the n new queries against the row's keys 0 .. start + n - 1
  // (one GEMM), each query's row softmax over the keys up to its own position, then P V.
  std::vector<float> p;
  for (int64_t r = 0; r < b; ++r) {
    const int64_t keys = starts[r] + n;
    p.assign(static_cast<size_t>(n * keys), 0.0f);
    for (int64_t j = 0; j < h; ++j) {
      const float* pq = F(q) + (r * h + j) * n * hd;
      const float* pk = F(kcache) + (r * h + j) * cap * hd;
      const float* pv = F(vcache) + (r * h + j) * cap * hd;
      float* po = W(out) + (r * h + j) * n * hd;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, keys, hd, scale, pq, hd, pk, hd, 0.0f, p.data(), keys);
      for (int64_t i = 0; i < n; ++i) {
        float* row = p.data() + i * keys;
        const int64_t upto = starts[r] + i + 1;  // this query's position, inclusive
        SoftmaxRow(row, row, upto);  // as CausalAttention's rows
        std::fill(row + upto, row + keys, 0.0f);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hd, keys, 1.0f, p.data(), keys, pv, hd, 0.0f, po, hd);
    }
  }
}

}  // namespace strata::ops
