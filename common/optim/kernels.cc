// kernels.cc: the optimizer kernels' dispatch (instruction set, chunks on the caller's pool,
// aliasing checks) and their scalar path. Compiled with -O3 -fno-math-errno -ffp-contract=off
// (common/CMakeLists.txt): no FMA contraction, so the scalar path computes exactly the float
// operations the vector paths do.
#include "common/optim/kernels.h"

#include <cmath>
#include <cstddef>
#include <functional>

#include "common/check.h"
#include "common/dtype.h"
#include "common/optim/internal.h"
#include "common/thread_pool.h"

namespace strata::optim {
namespace {

Isa Resolve(Isa isa) {
  if (isa == Isa::kBest) return BestIsa();
  STRATA_CHECK(IsaSupported(isa)) << "optimizer kernel: this CPU lacks " << IsaName(isa);
  return isa;
}

// Aborts when two of the arrays share a byte (null arrays are skipped).
void CheckDisjoint(std::initializer_list<std::pair<const void*, size_t>> arrays) {
  for (auto a = arrays.begin(); a != arrays.end(); ++a) {
    for (auto b = a + 1; b != arrays.end(); ++b) {
      if (a->first == nullptr || b->first == nullptr || a->second == 0 || b->second == 0) continue;
      const auto a0 = reinterpret_cast<uintptr_t>(a->first);
      const auto b0 = reinterpret_cast<uintptr_t>(b->first);
      STRATA_CHECK(a0 + a->second <= b0 || b0 + b->second <= a0)
          << "optimizer kernel: arrays overlap (" << a->first << " and " << b->first << ")";
    }
  }
}

// Runs body(begin, end) over [0, n): on the pool in chunks of o.grain, or inline.
void ForChunks(const KernelOptions& o, int64_t n,
               const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  if (o.pool == nullptr) {
    body(0, n);
  } else {
    o.pool->ParallelFor(n, o.grain, body);
  }
}

}  // namespace

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kBest:
      return "best";
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

bool IsaSupported(Isa isa) {
  switch (isa) {
    case Isa::kBest:
    case Isa::kScalar:
      return true;
#if defined(__x86_64__) && defined(__GNUC__)
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f");
#else
    case Isa::kAvx2:
    case Isa::kAvx512:
      return false;
#endif
  }
  return false;
}

Isa BestIsa() {
  if (IsaSupported(Isa::kAvx512)) return Isa::kAvx512;
  if (IsaSupported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

float BiasCorrection(float beta, int64_t step) {
  STRATA_CHECK_GE(step, 1) << "bias correction at step " << step;
  return 1.0f / (1.0f - static_cast<float>(
                            std::pow(static_cast<double>(beta), static_cast<double>(step))));
}

void AdamStep(const AdamHyper& h, const AdamArrays& a, const KernelOptions& o) {
  STRATA_CHECK(a.n >= 0 && (a.n == 0 || (a.w && a.m && a.v && a.grad))) << "adam: missing array";
  const size_t bytes = static_cast<size_t>(a.n) * sizeof(float);
  CheckDisjoint({{a.w, bytes}, {a.m, bytes}, {a.v, bytes}, {a.grad, bytes}, {a.w_bf16, bytes / 2}});
  const internal::AdamConsts c{h.lr,
                               h.beta1,
                               h.beta2,
                               1.0f - h.beta1,
                               1.0f - h.beta2,
                               h.eps,
                               h.l2,
                               h.decoupled,
                               h.grad_scale,
                               BiasCorrection(h.beta1, h.step),
                               BiasCorrection(h.beta2, h.step)};
  auto* run = internal::AdamScalar;
  switch (Resolve(o.isa)) {
    case Isa::kAvx512:
      run = internal::AdamAvx512;
      break;
    case Isa::kAvx2:
      run = internal::AdamAvx2;
      break;
    default:
      break;
  }
  ForChunks(o, a.n, [&](int64_t lo, int64_t hi) {
    run(c, a.w + lo, a.m + lo, a.v + lo, a.grad + lo, a.w_bf16 ? a.w_bf16 + lo : nullptr, hi - lo);
  });
}

void SgdStep(const SgdHyper& h, const SgdArrays& a, const KernelOptions& o) {
  STRATA_CHECK(a.n >= 0 && (a.n == 0 || (a.w && a.grad))) << "sgd: missing array";
  const size_t bytes = static_cast<size_t>(a.n) * sizeof(float);
  CheckDisjoint({{a.w, bytes}, {a.m, bytes}, {a.grad, bytes}, {a.w_bf16, bytes / 2}});
  const internal::SgdConsts c{h.lr, h.momentum, h.weight_decay, h.grad_scale, h.nesterov};
  auto* run = internal::SgdScalar;
  switch (Resolve(o.isa)) {
    case Isa::kAvx512:
      run = internal::SgdAvx512;
      break;
    case Isa::kAvx2:
      run = internal::SgdAvx2;
      break;
    default:
      break;
  }
  ForChunks(o, a.n, [&](int64_t lo, int64_t hi) {
    run(c, a.w + lo, a.m ? a.m + lo : nullptr, a.grad + lo, a.w_bf16 ? a.w_bf16 + lo : nullptr,
        hi - lo);
  });
}

namespace internal {
namespace {

// The loops, with the bf16 store compiled in or out (a branch inside would stop them
// vectorising).
template <bool kBf16>
void AdamLoop(const AdamConsts& c, float* __restrict w, float* __restrict m, float* __restrict v,
              const float* __restrict g, uint16_t* __restrict bf16, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float wi = w[i];
    const float gi = g[i] * c.scale + c.l2 * wi;
    const float mi = c.beta1 * m[i] + c.one_minus_beta1 * gi;
    const float vi = c.beta2 * v[i] + c.one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float wn = wi - c.lr * ((mi * c.c1) / (std::sqrt(vi * c.c2) + c.eps) + c.decoupled * wi);
    w[i] = wn;
    if constexpr (kBf16) bf16[i] = FloatToBF16(wn);
  }
}

template <bool kBf16>
void SgdLoop(const SgdConsts& c, float* __restrict w, float* __restrict m,
             const float* __restrict g, uint16_t* __restrict bf16, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float wi = w[i];
    const float gi = g[i] * c.scale + c.weight_decay * wi;
    float u = gi;
    if (m) {
      const float mi = c.momentum * m[i] + gi;
      m[i] = mi;
      u = c.nesterov ? gi + c.momentum * mi : mi;
    }
    const float wn = wi - c.lr * u;
    w[i] = wn;
    if constexpr (kBf16) bf16[i] = FloatToBF16(wn);
  }
}

}  // namespace

void AdamScalar(const AdamConsts& c, float* w, float* m, float* v, const float* g, uint16_t* bf16,
                int64_t n) {
  if (bf16) {
    AdamLoop<true>(c, w, m, v, g, bf16, n);
  } else {
    AdamLoop<false>(c, w, m, v, g, nullptr, n);
  }
}

void SgdScalar(const SgdConsts& c, float* w, float* m, const float* g, uint16_t* bf16, int64_t n) {
  if (bf16) {
    SgdLoop<true>(c, w, m, g, bf16, n);
  } else {
    SgdLoop<false>(c, w, m, g, nullptr, n);
  }
}

}  // namespace internal
}  // namespace strata::optim
