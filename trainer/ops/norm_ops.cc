// norm_ops.cc: the CPU LayerNorm ops of ops.h (forward, fused backward, and its two halves for
// the zero-bubble pipeline schedules) and their dispatch to cuda_ops.cu.
#include <cmath>

#include "trainer/ops/op_helpers.h"
#include "trainer/ops/ops.h"

namespace strata::ops {

using internal::CheckF32;
using internal::CheckSame;
using internal::Cols;
using internal::F;
using internal::Rows;
using internal::W;

namespace {

void CheckBackwardShapes(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd) {
  CheckF32(dy, "layernorm_backward dy");
  CheckF32(x, "layernorm_backward x");
  CheckSame(dy, x, "layernorm_backward");
  STRATA_CHECK(mean.numel() == Rows(x) && rstd.numel() == Rows(x)) << "layernorm_backward stats";
}

// The fused backward and its halves run these same two loops, so the split path computes every
// float of dx, dgamma and dbeta exactly as the fused one does.
void InputGradRows(const float* pdy, const float* px, const float* pg, const float* pm,
                   const float* pr, float* pdx, int64_t rows, int64_t d) {
  for (int64_t r = 0; r < rows; ++r) {
    const float m = pm[r], rs = pr[r];
    double s1 = 0, s2 = 0;  // mean(dxhat), mean(dxhat * xhat)
    for (int64_t i = 0; i < d; ++i) {
      const float xhat = (px[r * d + i] - m) * rs;
      const float dxhat = pdy[r * d + i] * pg[i];
      s1 += dxhat;
      s2 += dxhat * xhat;
    }
    const float a = static_cast<float>(s1 / d), b = static_cast<float>(s2 / d);
    for (int64_t i = 0; i < d; ++i) {
      const float xhat = (px[r * d + i] - m) * rs;
      pdx[r * d + i] = rs * (pdy[r * d + i] * pg[i] - a - xhat * b);
    }
  }
}

void ParamGradRows(const float* pdy, const float* px, const float* pm, const float* pr,
                   float* pdg, float* pdb, int64_t rows, int64_t d) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < d; ++i) {
      const float xhat = (px[r * d + i] - pm[r]) * pr[r];
      pdg[i] += pdy[r * d + i] * xhat;
      pdb[i] += pdy[r * d + i];
    }
  }
}

}  // namespace

void LayerNorm(const Exec& ex, const Tensor& x, const Tensor& gamma, const Tensor& beta,
               float eps, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  CheckF32(x, "layernorm x");
  CheckSame(x, y, "layernorm");
  const int64_t rows = Rows(x), d = Cols(x);
  STRATA_CHECK(gamma.numel() == d && beta.numel() == d) << "layernorm params";
  STRATA_CHECK(mean.numel() == rows && rstd.numel() == rows) << "layernorm stats";
  STRATA_DISPATCH(x, LayerNorm(ex, x, gamma, beta, eps, y, mean, rstd));
  const float *px = F(x), *pg = F(gamma), *pb = F(beta);
  float *py = W(y), *pm = W(mean), *pr = W(rstd);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * d;
    double s = 0;
    for (int64_t i = 0; i < d; ++i) s += xr[i];
    const double mu = s / d;
    double var = 0;
    for (int64_t i = 0; i < d; ++i) var += (xr[i] - mu) * (xr[i] - mu);
    const float rs = static_cast<float>(1.0 / std::sqrt(var / d + eps));
    const float m = static_cast<float>(mu);
    for (int64_t i = 0; i < d; ++i) py[r * d + i] = (xr[i] - m) * rs * pg[i] + pb[i];
    pm[r] = m;
    pr[r] = rs;
  }
}

void LayerNormBackward(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                       const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                       const Tensor& dgamma, const Tensor& dbeta) {
  CheckBackwardShapes(dy, x, mean, rstd);
  CheckSame(dy, dx, "layernorm_backward");
  const int64_t rows = Rows(x), d = Cols(x);
  STRATA_CHECK(gamma.numel() == d && dgamma.numel() == d && dbeta.numel() == d) << "ln params";
  STRATA_DISPATCH(dy, LayerNormBackward(ex, dy, x, gamma, mean, rstd, dx, dgamma, dbeta));
  InputGradRows(F(dy), F(x), F(gamma), F(mean), F(rstd), W(dx), rows, d);
  ParamGradRows(F(dy), F(x), F(mean), F(rstd), W(dgamma), W(dbeta), rows, d);
}

void LayerNormBackwardInput(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                            const Tensor& mean, const Tensor& rstd, const Tensor& dx) {
  CheckBackwardShapes(dy, x, mean, rstd);
  CheckSame(dy, dx, "layernorm_backward_input");
  const int64_t rows = Rows(x), d = Cols(x);
  STRATA_CHECK(gamma.numel() == d) << "layernorm_backward_input gamma";
  STRATA_DISPATCH(dy, LayerNormBackwardInput(ex, dy, x, gamma, mean, rstd, dx));
  InputGradRows(F(dy), F(x), F(gamma), F(mean), F(rstd), W(dx), rows, d);
}

void LayerNormBackwardWeight(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& mean,
                             const Tensor& rstd, const Tensor& dgamma, const Tensor& dbeta) {
  CheckBackwardShapes(dy, x, mean, rstd);
  const int64_t rows = Rows(x), d = Cols(x);
  STRATA_CHECK(dgamma.numel() == d && dbeta.numel() == d) << "layernorm_backward_weight params";
  STRATA_DISPATCH(dy, LayerNormBackwardWeight(ex, dy, x, mean, rstd, dgamma, dbeta));
  ParamGradRows(F(dy), F(x), F(mean), F(rstd), W(dgamma), W(dbeta), rows, d);
}

}  // namespace strata::ops
