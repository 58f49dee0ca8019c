// internal.h: common/optim's per-instruction-set range kernels (kernels.cc dispatches to them;
// tests call the bf16 conversions directly). Not for use outside common/optim and its tests.
#pragma once

#include <cstdint>

namespace strata::optim::internal {

// Adam's per-call constants, computed once in float from AdamHyper.
struct AdamConsts {
  float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, l2, decoupled, scale, c1, c2;
};
struct SgdConsts {
  float lr, momentum, weight_decay, scale;
  bool nesterov;
};

// Each runs elements [0, n) of the arrays it is given (already offset to a chunk); m may be
// null for SGD, bf16 may be null for all. The vector versions hand their tails to the scalar
// one, so a tail is computed exactly as the scalar path computes it.
void AdamScalar(const AdamConsts& c, float* w, float* m, float* v, const float* g, uint16_t* bf16,
                int64_t n);
void AdamAvx2(const AdamConsts& c, float* w, float* m, float* v, const float* g, uint16_t* bf16,
              int64_t n);
void AdamAvx512(const AdamConsts& c, float* w, float* m, float* v, const float* g, uint16_t* bf16,
                int64_t n);
void SgdScalar(const SgdConsts& c, float* w, float* m, const float* g, uint16_t* bf16, int64_t n);
void SgdAvx2(const SgdConsts& c, float* w, float* m, const float* g, uint16_t* bf16, int64_t n);
void SgdAvx512(const SgdConsts& c, float* w, float* m, const float* g, uint16_t* bf16, int64_t n);

// float -> bf16, round to nearest even, NaN kept a NaN (common/dtype.h's FloatToBF16, vectorised).
void ToBF16Avx2(const float* src, uint16_t* dst, int64_t n);
void ToBF16Avx512(const float* src, uint16_t* dst, int64_t n);

}  // namespace strata::optim::internal
