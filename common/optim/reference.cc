// reference.cc: AdamReference and SgdReference, plain double-precision loops.
#include "common/optim/reference.h"

#include <cmath>

#include "common/dtype.h"

namespace strata::optim {

void AdamReference(const AdamHyper& h, const AdamArrays& a) {
  const double b1 = h.beta1, b2 = h.beta2;
  const double bc1 = 1 - std::pow(b1, static_cast<double>(h.step));
  const double bc2 = 1 - std::pow(b2, static_cast<double>(h.step));
  for (int64_t i = 0; i < a.n; ++i) {
    const double w = a.w[i];
    const double g = static_cast<double>(a.grad[i]) * h.grad_scale + static_cast<double>(h.l2) * w;
    const double m = b1 * a.m[i] + (1 - b1) * g;
    const double v = b2 * a.v[i] + (1 - b2) * g * g;
    a.m[i] = static_cast<float>(m);
    a.v[i] = static_cast<float>(v);
    const double update =
        (m / bc1) / (std::sqrt(v / bc2) + h.eps) + static_cast<double>(h.decoupled) * w;
    a.w[i] = static_cast<float>(w - h.lr * update);
    if (a.w_bf16) a.w_bf16[i] = FloatToBF16(a.w[i]);
  }
}

void SgdReference(const SgdHyper& h, const SgdArrays& a) {
  for (int64_t i = 0; i < a.n; ++i) {
    const double w = a.w[i];
    const double g =
        static_cast<double>(a.grad[i]) * h.grad_scale + static_cast<double>(h.weight_decay) * w;
    double u = g;
    if (a.m) {
      const double m = static_cast<double>(h.momentum) * a.m[i] + g;
      a.m[i] = static_cast<float>(m);
      u = h.nesterov ? g + h.momentum * m : m;
    }
    a.w[i] = static_cast<float>(w - h.lr * u);
    if (a.w_bf16) a.w_bf16[i] = FloatToBF16(a.w[i]);
  }
}

}  // namespace strata::optim
