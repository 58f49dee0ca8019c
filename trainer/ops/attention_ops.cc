// attention_ops.cc: causal self-attention over whole sequences on the CPU (ops.h, "Attention"):
// per head, the scores as one GEMM, a row softmax over the visible keys and the output as a
// second GEMM; the backward as GEMMs around the softmax's backward. At ex.matmul tf32 / bf16 each
// GEMM multiplies rounded copies of its inputs, as the CUDA ops' cuBLAS GEMMs do (the stored
// probabilities stay f32, the softmax's backward reads them so). And the moves of heads between
// the [tokens, 3 x width] projection layout and [batch, heads, tokens, head dim].
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "trainer/ops/op_helpers.h"
#include "trainer/ops/ops.h"

namespace strata::ops {

using internal::CheckF32;
using internal::CheckSame;
using internal::F;
using internal::RoundedForMatmul;
using internal::RoundForMatmul;
using internal::SoftmaxBackwardRow;
using internal::SoftmaxRow;
using internal::W;

namespace {

// x[0..n) as a GEMM at ex.matmul multiplies it: x itself at fp32, else a rounded copy in `scratch`.
const float* RoundedCopy(const Exec& ex, const float* x, int64_t n, std::vector<float>& scratch) {
  if (ex.matmul == MatmulPrecision::kFp32) return x;
  scratch.resize(static_cast<size_t>(n));
  RoundForMatmul(ex.matmul, x, scratch.data(), n);
  return scratch.data();
}

}  // namespace

void CausalAttention(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& att, const Tensor& out) {
  CheckF32(q, "attention q");
  CheckSame(q, k, "attention k");
  CheckSame(q, v, "attention v");
  CheckSame(q, out, "attention out");
  STRATA_CHECK(q.dim() == 4) << "attention wants [B, H, T, hd]";
  const int64_t bh = q.size(0) * q.size(1), t = q.size(2), hd = q.size(3);
  STRATA_CHECK(att.shape() == (Shape{q.size(0), q.size(1), t, t})) << "attention probs shape";
  STRATA_DISPATCH(q, CausalAttention(ex, q, k, v, att, out));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const Tensor rq = RoundedForMatmul(ex, q), rk = RoundedForMatmul(ex, k), rv = RoundedForMatmul(ex, v);
  std::vector<float> rounded_p;  // one head's P, rounded for P V
  // Per head: scores = Q K^T (one GEMM; the upper triangle is computed and then masked, which
  // costs less than skipping it element by element), row softmax over c <= r, out = P V.
  for (int64_t i = 0; i < bh; ++i) {
    const float *pq = F(rq) + i * t * hd, *pk = F(rk) + i * t * hd, *pv = F(rv) + i * t * hd;
    float* pa = W(att) + i * t * t;
    float* po = W(out) + i * t * hd;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, hd, scale, pq, hd, pk, hd, 0.0f, pa, t);
    for (int64_t r = 0; r < t; ++r) {
      float* row = pa + r * t;
      SoftmaxRow(row, row, r + 1);
      std::fill(row + r + 1, row + t, 0.0f);
    }
    const float* pp = RoundedCopy(ex, pa, t * t, rounded_p);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, hd, t, 1.0f, pp, t, pv, hd, 0.0f, po, hd);
  }
}

void CausalAttentionBackward(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& att, const Tensor& dout, const Tensor& dq,
                             const Tensor& dk, const Tensor& dv) {
  CheckF32(q, "attention_backward q");
  CheckSame(q, k, "attention_backward");
  CheckSame(q, v, "attention_backward");
  CheckSame(q, dout, "attention_backward");
  CheckSame(q, dq, "attention_backward");
  CheckSame(q, dk, "attention_backward");
  CheckSame(q, dv, "attention_backward");
  const int64_t bh = q.size(0) * q.size(1), t = q.size(2), hd = q.size(3);
  STRATA_DISPATCH(q, CausalAttentionBackward(ex, q, k, v, att, dout, dq, dk, dv));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Per head, as GEMMs: dV = P^T dO; dP = dO V^T; dS = softmax backward of each row over
  // c <= r (zero above the diagonal); dQ = scale dS K; dK = scale dS^T Q.
  std::vector<float> ds(t * t);
  const Tensor rq = RoundedForMatmul(ex, q), rk = RoundedForMatmul(ex, k), rv = RoundedForMatmul(ex, v);
  const Tensor rdo = RoundedForMatmul(ex, dout);
  std::vector<float> rounded_p;  // one head's P, rounded for P^T dO
  for (int64_t i = 0; i < bh; ++i) {
    const int64_t o = i * t * hd;
    const float *pq = F(rq) + o, *pk = F(rk) + o, *pv = F(rv) + o, *pdo = F(rdo) + o;
    const float* pa = F(att) + i * t * t;
    float *pdq = W(dq) + o, *pdk = W(dk) + o, *pdv = W(dv) + o;
    const float* pp = RoundedCopy(ex, pa, t * t, rounded_p);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, t, hd, t, 1.0f, pp, t, pdo, hd, 0.0f, pdv, hd);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, hd, 1.0f, pdo, hd, pv, hd, 0.0f, ds.data(), t);
    for (int64_t r = 0; r < t; ++r) {
      float* row = ds.data() + r * t;
      SoftmaxBackwardRow(pa + r * t, row, row, r + 1);
      std::fill(row + r + 1, row + t, 0.0f);
    }
    RoundForMatmul(ex.matmul, ds.data(), ds.data(), t * t);  // (CUDA rounds dS scaled: the same for hd 4^n)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, hd, t, scale, ds.data(), t, pk, hd, 0.0f, pdq, hd);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, t, hd, t, scale, ds.data(), t, pq, hd, 0.0f, pdk, hd);
  }
}

namespace {

// Copies between a token-major block and its head-major form: the block is `heads * hd` columns
// from column `col` of [batch * t, row] rows; the head-major form is [batch, heads, t, hd].
// `to_heads`: src is the block and dst the head-major form; else the other way.
void MoveHeads(const float* src, float* dst, bool to_heads, int64_t batch, int64_t heads, int64_t t,
               int64_t hd, int64_t row, int64_t col) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < t; ++s)
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t token = (b * t + s) * row + col + h * hd, head = ((b * heads + h) * t + s) * hd;
        std::memcpy(dst + (to_heads ? head : token), src + (to_heads ? token : head), hd * sizeof(float));
      }
}

}  // namespace

void SplitHeads(const Exec& ex, const Tensor& qkv, int64_t batch, int64_t heads, const Tensor& q,
                const Tensor& k, const Tensor& v) {
  CheckF32(qkv, "split_heads qkv");
  STRATA_CHECK(qkv.dim() == 2 && qkv.size(1) % (3 * heads) == 0 && qkv.size(0) % batch == 0)
      << "split_heads " << ShapeToString(qkv.shape());
  const int64_t t = qkv.size(0) / batch, c = qkv.size(1) / 3, hd = c / heads;
  const Shape want{batch, heads, t, hd};
  STRATA_CHECK(q.shape() == want && k.shape() == want && v.shape() == want) << "split_heads out";
  STRATA_DISPATCH(qkv, SplitHeads(ex, qkv, batch, heads, q, k, v));
  float* dst[3] = {W(q), W(k), W(v)};
  for (int w = 0; w < 3; ++w) MoveHeads(F(qkv), dst[w], true, batch, heads, t, hd, 3 * c, w * c);
}

void MergeHeadsGrad(const Exec& ex, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                    const Tensor& dqkv) {
  CheckF32(dq, "merge_heads_grad");
  CheckSame(dq, dk, "merge_heads_grad");
  CheckSame(dq, dv, "merge_heads_grad");
  const int64_t batch = dq.size(0), heads = dq.size(1), t = dq.size(2), hd = dq.size(3);
  const int64_t c = heads * hd;
  STRATA_CHECK(dqkv.shape() == (Shape{batch * t, 3 * c})) << "merge_heads_grad out";
  STRATA_DISPATCH(dq, MergeHeadsGrad(ex, dq, dk, dv, dqkv));
  const float* src[3] = {F(dq), F(dk), F(dv)};
  for (int w = 0; w < 3; ++w) MoveHeads(src[w], W(dqkv), false, batch, heads, t, hd, 3 * c, w * c);
}

void MergeHeads(const Exec& ex, const Tensor& y, const Tensor& out) {
  CheckF32(y, "merge_heads");
  const int64_t batch = y.size(0), heads = y.size(1), t = y.size(2), hd = y.size(3);
  STRATA_CHECK(out.shape() == (Shape{batch * t, heads * hd})) << "merge_heads out";
  STRATA_DISPATCH(y, MergeHeads(ex, y, out));
  MoveHeads(F(y), W(out), false, batch, heads, t, hd, heads * hd, 0);
}

void SplitHeadsGrad(const Exec& ex, const Tensor& dout, const Tensor& dy) {
  CheckF32(dout, "split_heads_grad");
  const int64_t batch = dy.size(0), heads = dy.size(1), t = dy.size(2), hd = dy.size(3);
  STRATA_CHECK(dout.shape() == (Shape{batch * t, heads * hd})) << "split_heads_grad in";
  STRATA_DISPATCH(dout, SplitHeadsGrad(ex, dout, dy));
  MoveHeads(F(dout), W(dy), true, batch, heads, t, hd, heads * hd, 0);
}

}  // namespace strata::ops
