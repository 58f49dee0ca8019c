// block_attention_ops.cc: blockwise causal attention by global positions (ops.h, "Blockwise
// attention"), the compute of ring attention: each block of keys and values is folded into a
// running (out, lse) with flash attention's online softmax, and the backward recomputes each
// block's probabilities from the final lse. Per head, as GEMMs; the positions decide the mask,
// so a block may be fully visible, causal on its diagonal, or (partly) hidden. CPU only for now:
// on a CUDA tensor they fail naming the op.
#include <algorithm>
#include <cmath>
#include <vector>

#include <cblas.h>

#include "trainer/ops/op_helpers.h"
#include "trainer/ops/ops.h"

namespace strata::ops {

using namespace internal;  // NOLINT: F, W, CheckF32, CheckSame

namespace {

struct Dims {
  int64_t bh, tq, tk, hd;
};

Dims CheckBlock(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int64_t>& qpos,
                const std::vector<int64_t>& kpos, const Tensor& lse, const char* what) {
  CheckF32(q, what);
  CheckF32(k, what);
  CheckF32(v, what);
  CheckF32(lse, what);
  CheckSame(k, v, what);
  STRATA_CHECK(q.is_cpu()) << what << ": runs on the CPU only (ring attention is not built for CUDA yet)";
  STRATA_CHECK(q.dim() == 4 && k.dim() == 4 && q.size(0) == k.size(0) && q.size(1) == k.size(1) &&
               q.size(3) == k.size(3))
      << what << ": q " << ShapeToString(q.shape()) << " against k " << ShapeToString(k.shape());
  STRATA_CHECK(static_cast<int64_t>(qpos.size()) == q.size(2) && static_cast<int64_t>(kpos.size()) == k.size(2))
      << what << ": " << qpos.size() << " query and " << kpos.size() << " key positions for "
      << ShapeToString(q.shape()) << " and " << ShapeToString(k.shape());
  STRATA_CHECK(lse.shape() == (Shape{q.size(0), q.size(1), q.size(2)})) << what << ": lse " << ShapeToString(lse.shape());
  return {q.size(0) * q.size(1), q.size(2), k.size(2), q.size(3)};
}

}  // namespace

void BlockAttention(const Exec& /*ex*/, const Tensor& q, const Tensor& k, const Tensor& v,
                    const std::vector<int64_t>& qpos, const std::vector<int64_t>& kpos, const Tensor& out,
                    const Tensor& lse) {
  const Dims d = CheckBlock(q, k, v, qpos, kpos, lse, "block attention");
  CheckSame(q, out, "block attention out");
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hd));
  std::vector<float> s(d.tq * d.tk), o(d.tq * d.hd);
  std::vector<double> block_lse(d.tq);
  for (int64_t i = 0; i < d.bh; ++i) {
    const float *pq = F(q) + i * d.tq * d.hd, *pk = F(k) + i * d.tk * d.hd, *pv = F(v) + i * d.tk * d.hd;
    float *po = W(out) + i * d.tq * d.hd, *pl = W(lse) + i * d.tq;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d.tq, d.tk, d.hd, scale, pq, d.hd, pk, d.hd, 0.0f, s.data(),
                d.tk);
    // Each row's softmax over its visible keys (normalised within the block), 0 elsewhere.
    for (int64_t r = 0; r < d.tq; ++r) {
      float* row = s.data() + r * d.tk;
      float mx = -INFINITY;
      for (int64_t c = 0; c < d.tk; ++c) {
        if (kpos[c] <= qpos[r]) mx = std::max(mx, row[c]);
      }
      if (mx == -INFINITY) {  // nothing visible in this block
        std::fill(row, row + d.tk, 0.0f);
        block_lse[r] = -INFINITY;
        continue;
      }
      double sum = 0;
      for (int64_t c = 0; c < d.tk; ++c) {
        row[c] = kpos[c] <= qpos[r] ? std::exp(row[c] - mx) : 0.0f;
        sum += row[c];
      }
      const auto inv = static_cast<float>(1.0 / sum);
      for (int64_t c = 0; c < d.tk; ++c) row[c] *= inv;
      block_lse[r] = std::log(sum) + mx;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d.tq, d.hd, d.tk, 1.0f, s.data(), d.tk, pv, d.hd, 0.0f,
                o.data(), d.hd);
    // out, lse <- the softmax over both key sets: weights exp(lse_a - lse) and exp(lse_b - lse).
    for (int64_t r = 0; r < d.tq; ++r) {
      const double b = block_lse[r];
      if (b == -INFINITY) continue;
      const double a = pl[r];
      const double m = std::max(a, b);
      const double merged = m + std::log(std::exp(a - m) + std::exp(b - m));
      const auto wa = static_cast<float>(std::exp(a - merged)), wb = static_cast<float>(std::exp(b - merged));
      float* orow = po + r * d.hd;
      const float* brow = o.data() + r * d.hd;
      for (int64_t c = 0; c < d.hd; ++c) orow[c] = wa * orow[c] + wb * brow[c];
      pl[r] = static_cast<float>(merged);
    }
  }
}

void AttentionDelta(const Exec& /*ex*/, const Tensor& out, const Tensor& dout, const Tensor& delta) {
  CheckF32(out, "attention delta");
  CheckSame(out, dout, "attention delta");
  CheckF32(delta, "attention delta");
  STRATA_CHECK(out.is_cpu()) << "attention delta: runs on the CPU only (ring attention is not built for CUDA yet)";
  STRATA_CHECK(out.dim() == 4 && delta.shape() == (Shape{out.size(0), out.size(1), out.size(2)}))
      << "attention delta: out " << ShapeToString(out.shape()) << ", delta " << ShapeToString(delta.shape());
  const int64_t rows = delta.numel(), hd = out.size(3);
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0;
    for (int64_t c = 0; c < hd; ++c) dot += static_cast<double>(F(out)[r * hd + c]) * F(dout)[r * hd + c];
    W(delta)[r] = static_cast<float>(dot);
  }
}

void BlockAttentionBackward(const Exec& /*ex*/, const Tensor& q, const Tensor& k, const Tensor& v,
                            const std::vector<int64_t>& qpos, const std::vector<int64_t>& kpos, const Tensor& lse,
                            const Tensor& dout, const Tensor& delta, const Tensor& dq, const Tensor& dk,
                            const Tensor& dv) {
  const Dims d = CheckBlock(q, k, v, qpos, kpos, lse, "block attention backward");
  CheckSame(q, dout, "block attention backward dout");
  CheckSame(q, dq, "block attention backward dq");
  CheckSame(k, dk, "block attention backward dk");
  CheckSame(k, dv, "block attention backward dv");
  CheckSame(lse, delta, "block attention backward delta");
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hd));
  // Per head: P = exp(scale Q K^T - lse) where visible; dV += P^T dO; dP = dO V^T;
  // dS = P (dP - delta); dQ += scale dS K; dK += scale dS^T Q.
  std::vector<float> p(d.tq * d.tk), ds(d.tq * d.tk);
  for (int64_t i = 0; i < d.bh; ++i) {
    const int64_t oq = i * d.tq * d.hd, ok = i * d.tk * d.hd;
    const float *pq = F(q) + oq, *pk = F(k) + ok, *pv = F(v) + ok, *pdo = F(dout) + oq;
    const float *pl = F(lse) + i * d.tq, *pd = F(delta) + i * d.tq;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d.tq, d.tk, d.hd, scale, pq, d.hd, pk, d.hd, 0.0f, p.data(),
                d.tk);
    for (int64_t r = 0; r < d.tq; ++r) {
      float* row = p.data() + r * d.tk;
      for (int64_t c = 0; c < d.tk; ++c) row[c] = kpos[c] <= qpos[r] ? std::exp(row[c] - pl[r]) : 0.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d.tk, d.hd, d.tq, 1.0f, p.data(), d.tk, pdo, d.hd, 1.0f,
                W(dv) + ok, d.hd);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d.tq, d.tk, d.hd, 1.0f, pdo, d.hd, pv, d.hd, 0.0f, ds.data(),
                d.tk);
    for (int64_t r = 0; r < d.tq; ++r) {
      const float* prow = p.data() + r * d.tk;
      float* drow = ds.data() + r * d.tk;
      for (int64_t c = 0; c < d.tk; ++c) drow[c] = prow[c] * (drow[c] - pd[r]);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d.tq, d.hd, d.tk, scale, ds.data(), d.tk, pk, d.hd, 1.0f,
                W(dq) + oq, d.hd);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d.tk, d.hd, d.tq, scale, ds.data(), d.tk, pq, d.hd, 1.0f,
                W(dk) + ok, d.hd);
  }
}

}  // namespace strata::ops
