// matmul_ops.cc: ops::Matmul on the CPU (OpenBLAS sgemm), at the precision ex.matmul asks for,
// and its dispatch to cuda_ops.cu for CUDA tensors.
#include <cblas.h>

#include <bit>
#include <cstdint>
#include <cstring>

#include "trainer/ops/op_helpers.h"
#include "trainer/ops/ops.h"
#include "trainer/ops/parallel.h"

namespace strata::ops {

using internal::CheckF32;
using internal::F;
using internal::W;

namespace {

// x rounded to nearest (ties to even) with `keep` mantissa bits: 7 for bf16, 10 for tf32. NaN
// and infinity stay as they are; a value that rounds past the largest finite one becomes inf.
float RoundMantissa(float x, int keep) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7F800000u) == 0x7F800000u) return x;
  const int drop = 23 - keep;
  const uint32_t half = (1u << (drop - 1)) - 1u;
  bits += half + ((bits >> drop) & 1u);
  return std::bit_cast<float>(bits & ~((1u << drop) - 1u));
}

}  // namespace

namespace internal {

void RoundForMatmul(MatmulPrecision p, const float* in, float* out, int64_t n) {
  if (p == MatmulPrecision::kFp32) {
    if (out != in) std::memcpy(out, in, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const int keep = p == MatmulPrecision::kBf16 ? 7 : 10;
  ParallelFor(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) out[i] = RoundMantissa(in[i], keep);
  });
}

Tensor RoundedForMatmul(const Exec& ex, const Tensor& t) {
  if (ex.matmul == MatmulPrecision::kFp32) return t;
  Tensor r = NewTensor(ex, t.shape());
  RoundForMatmul(ex.matmul, F(t), W(r), r.numel());  // one pass: read t, write the rounding
  return r;
}

}  // namespace internal

void Matmul(const Exec& ex, const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a,
            bool trans_b, float alpha, float beta) {
  CheckF32(a, "matmul a");
  CheckF32(b, "matmul b");
  CheckF32(c, "matmul c");
  STRATA_CHECK(a.dim() == b.dim() && a.dim() == c.dim() && (a.dim() == 2 || a.dim() == 3))
      << "matmul wants 2-D or 3-D operands";
  const int o = a.dim() - 2;
  const int64_t batch = a.dim() == 3 ? a.size(0) : 1;
  if (a.dim() == 3) {
    STRATA_CHECK(b.size(0) == batch && c.size(0) == batch) << "batch mismatch";
  }
  const int64_t m = trans_a ? a.size(o + 1) : a.size(o);
  const int64_t k = trans_a ? a.size(o) : a.size(o + 1);
  const int64_t kb = trans_b ? b.size(o + 1) : b.size(o);
  const int64_t n = trans_b ? b.size(o) : b.size(o + 1);
  STRATA_CHECK(k == kb) << "matmul inner dims " << ShapeToString(a.shape()) << " "
                        << ShapeToString(b.shape());
  STRATA_CHECK(c.size(o) == m && c.size(o + 1) == n) << "matmul output " << ShapeToString(c.shape());
  STRATA_DISPATCH(a, Matmul(ex, a, b, c, trans_a, trans_b, alpha, beta));
  if (m * n * batch == 0) return;  // nothing to write (BLAS rejects a zero leading dimension)
  if (k == 0) {                    // an empty sum: C = beta * C
    Scale(ex, c, beta);
    return;
  }
  // tf32 / bf16: the products of the rounded values are exact in fp32 (at most 11 x 11 or 8 x 8
  // significant bits), so sgemm on them accumulates those products in fp32.
  const Tensor ra = internal::RoundedForMatmul(ex, a), rb = internal::RoundedForMatmul(ex, b);
  const int64_t lda = a.size(o + 1), ldb = b.size(o + 1), ldc = n;
  for (int64_t i = 0; i < batch; ++i) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, F(ra) + i * m * k, lda,
                F(rb) + i * k * n, ldb, beta, W(c) + i * m * n, ldc);
  }
}

}  // namespace strata::ops
