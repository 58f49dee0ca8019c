// kernels.h: the CPU optimizer kernels (Adam/AdamW, SGD with momentum) that the parameter
// servers (ps/optimizer.cc) and the trainer's CPU ops (trainer/ops/ops.cc) both call: fused
// (one pass reads g, w, m, v and writes w, m, v and optionally a bf16 copy of w), vectorised
// for AVX-512 and AVX2 (chosen at run time, scalar fallback), threaded over chunks on a pool
// the caller owns. reference.h holds the double-precision reference the tests compare to.
#pragma once

#include <cstdint>
#include <string_view>

namespace strata {
class ThreadPool;
}

namespace strata::optim {

// The instruction sets a kernel can run on. Every path computes the same float operations in
// the same order without FMA contraction, so all paths give the same bits (tests check it).
enum class Isa : uint8_t { kBest, kScalar, kAvx2, kAvx512 };
std::string_view IsaName(Isa isa);  // "best", "scalar", "avx2", "avx512"
bool IsaSupported(Isa isa);         // this CPU runs it (kBest and kScalar always)
Isa BestIsa();                      // the widest supported: kAvx512, kAvx2 or kScalar

// How a kernel runs. A plain value; the pool is not owned.
struct KernelOptions {
  Isa isa = Isa::kBest;        // kBest: BestIsa(); an unsupported one is a bug (aborts)
  ThreadPool* pool = nullptr;  // null: the calling thread alone
  int64_t grain = 1 << 16;     // elements per chunk on the pool: smaller wakes it for less
};

// Adam with both weight-decay forms, per element (float arithmetic, in this order):
//   g  = grad * grad_scale + l2 * w
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + (1 - beta2) * g * g
//   w  = w - lr * ((m * c1) / (sqrt(v * c2) + eps) + decoupled * w)
// with c_k = 1 / (1 - beta_k^step) (the power in double, then rounded to float). Adam is
// l2 = weight decay, decoupled = 0; AdamW is l2 = 0, decoupled = weight decay (as in PyTorch's
// AdamW, the decay is scaled by lr but not by the bias corrections).
struct AdamHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float l2 = 0.0f;          // coupled weight decay (added to the gradient)
  float decoupled = 0.0f;   // decoupled weight decay (AdamW)
  float grad_scale = 1.0f;  // 1/W for a BSP mean, times a clipping factor
  int64_t step = 1;         // 1-based step count for the bias corrections
};

// SGD, per element:
//   g = grad * grad_scale + weight_decay * w
//   m = momentum * m + g;  u = nesterov ? g + momentum * m : m     (when m is given)
//   u = g                                                          (when m is null)
//   w = w - lr * u
struct SgdHyper {
  float lr = 0.01f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  float grad_scale = 1.0f;
  bool nesterov = false;
};

// The arrays of one update, n elements each. Aliasing: w, m, v, grad and w_bf16 must not
// overlap one another (checked: an overlap aborts); in-place is the point, so each of w, m, v
// is read and written through the same pointer. No alignment is required.
struct AdamArrays {
  float* w;
  float* m;
  float* v;
  const float* grad;
  uint16_t* w_bf16 = nullptr;  // if set: the updated w in bf16 (round to nearest even)
  int64_t n;
};
struct SgdArrays {
  float* w;
  float* m;  // momentum buffer; null: plain SGD (no state)
  const float* grad;
  uint16_t* w_bf16 = nullptr;
  int64_t n;
};

void AdamStep(const AdamHyper& h, const AdamArrays& a, const KernelOptions& o = {});
void SgdStep(const SgdHyper& h, const SgdArrays& a, const KernelOptions& o = {});

// The bias-correction factor 1 / (1 - beta^step) as the kernels use it.
float BiasCorrection(float beta, int64_t step);

}  // namespace strata::optim
