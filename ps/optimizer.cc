// optimizer.cc: the server-side optimizers on one record. SGD and Adam/AdamW run the shared
// CPU kernels (common/optim/kernels.h, the trainer's too); Adagrad, which only servers offer,
// is a loop here, compiled with -O3 -fno-math-errno (see CMakeLists.txt) so it vectorises, and
// target_clones adds an AVX2+FMA version picked at run time.
#include "ps/optimizer.h"

#include <cmath>

#include "common/check.h"
#include "common/optim/kernels.h"

namespace strata {
namespace {

// The factor that clips the (scaled) gradient to `clip` in L2 norm; 1 when off or inside.
template <typename Real>
Real ClipScale(const float* g, int n, float scale, float clip) {
  if (clip <= 0) return 1;
  Real sq = 0;
  for (int i = 0; i < n; ++i) sq += static_cast<Real>(g[i]) * g[i];
  const Real norm = std::sqrt(sq) * std::abs(static_cast<Real>(scale));
  return norm > clip ? clip / norm : Real(1);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define STRATA_VECTOR_CLONES __attribute__((target_clones("arch=haswell", "default")))
#else
#define STRATA_VECTOR_CLONES
#endif

STRATA_VECTOR_CLONES
void Adagrad(float* __restrict w, float* __restrict acc, const float* __restrict g, int n, float s,
             float lr, float eps, float wd) {
  for (int i = 0; i < n; ++i) {
    const float gi = g[i] * s + wd * w[i];
    acc[i] += gi * gi;
    w[i] -= lr * gi / (std::sqrt(acc[i]) + eps);
  }
}

}  // namespace

void ApplyUpdate(const OptimizerSpec& o, int state_slots, std::span<float> record, int n,
                 const float* grad, float grad_scale) {
  const int row = (static_cast<int>(record.size()) - 1) / (1 + state_slots);
  STRATA_CHECK_LE(n, row);
  float* w = record.data();
  float* s0 = state_slots > 0 ? w + row : nullptr;
  float* s1 = state_slots > 1 ? w + 2 * row : nullptr;
  const uint32_t step = RecordStep(record) + 1;
  SetRecordStep(record, step);
  const float scale = grad_scale * ClipScale<float>(grad, n, grad_scale, o.clip_norm);
  switch (o.kind) {
    case OptimizerKind::kSgd:
      return optim::SgdStep(
          {.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay, .grad_scale = scale},
          {.w = w, .m = o.momentum > 0 ? s0 : nullptr, .grad = grad, .n = n});
    case OptimizerKind::kAdagrad:
      return Adagrad(w, s0, grad, n, scale, o.lr, o.eps, o.weight_decay);
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW: {
      const bool decoupled = o.kind == OptimizerKind::kAdamW;
      return optim::AdamStep({.lr = o.lr,
                              .beta1 = o.beta1,
                              .beta2 = o.beta2,
                              .eps = o.eps,
                              .l2 = decoupled ? 0.0f : o.weight_decay,
                              .decoupled = decoupled ? o.weight_decay : 0.0f,
                              .grad_scale = scale,
                              .step = step},
                             {.w = w, .m = s0, .v = s1, .grad = grad, .n = n});
    }
  }
}

void ApplyUpdateReference(const OptimizerSpec& o, int state_slots, std::span<float> record, int n,
                          const float* grad, float grad_scale) {
  const int row = (static_cast<int>(record.size()) - 1) / (1 + state_slots);
  float* w = record.data();
  const uint32_t step = RecordStep(record) + 1;
  SetRecordStep(record, step);
  const double scale = grad_scale * ClipScale<double>(grad, n, grad_scale, o.clip_norm);
  const bool adamw = o.kind == OptimizerKind::kAdamW;
  for (int i = 0; i < n; ++i) {
    double wi = w[i];
    double g = grad[i] * scale + (adamw ? 0.0 : o.weight_decay * wi);
    switch (o.kind) {
      case OptimizerKind::kSgd:
        if (o.momentum > 0) {
          double m = o.momentum * static_cast<double>(w[row + i]) + g;
          w[row + i] = static_cast<float>(m);
          g = m;
        }
        wi -= o.lr * g;
        break;
      case OptimizerKind::kAdagrad: {
        double acc = static_cast<double>(w[row + i]) + g * g;
        w[row + i] = static_cast<float>(acc);
        wi -= o.lr * g / (std::sqrt(acc) + o.eps);
        break;
      }
      case OptimizerKind::kAdam:
      case OptimizerKind::kAdamW: {
        double m = o.beta1 * static_cast<double>(w[row + i]) + (1 - o.beta1) * g;
        double v = o.beta2 * static_cast<double>(w[2 * row + i]) + (1 - o.beta2) * g * g;
        w[row + i] = static_cast<float>(m);
        w[2 * row + i] = static_cast<float>(v);
        const double mhat = m / (1 - std::pow(static_cast<double>(o.beta1), step));
        const double vhat = v / (1 - std::pow(static_cast<double>(o.beta2), step));
        wi -= o.lr * (mhat / (std::sqrt(vhat) + o.eps) + (adamw ? o.weight_decay * wi : 0.0));
        break;
      }
    }
    w[i] = static_cast<float>(wi);
  }
}

}  // namespace strata
