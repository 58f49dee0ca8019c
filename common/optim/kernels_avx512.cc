// kernels_avx512.cc: the AVX-512 path of the optimizer kernels (16 floats a step, tails on the
// scalar path). Compiled for AVX-512F by the pragma below, called only when the CPU has it
// (kernels.cc). The same operations as the scalar loops, in the same order, without FMA: the same
// bits.

// GCC 12 warns about the _mm512_undefined_* placeholders inside its own intrinsics at -O3
// (GCC bug 105593, fixed in 13); the warning is in the header, not in this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "common/check.h"
#include "common/dtype.h"
#include "common/optim/internal.h"

#if defined(__x86_64__) && defined(__GNUC__)

#if defined(__clang__)  // clang ignores GCC's target pragma
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f")
#endif

namespace strata::optim::internal {
namespace {

// common/dtype.h's FloatToBF16 on 16 lanes: round to nearest even; a NaN is truncated and
// keeps a payload bit so it cannot become inf.
inline void StoreBf16(uint16_t* dst, __m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i hi = _mm512_srli_epi32(bits, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7FFF)), lsb), 16);
  const __mmask16 no_payload = _mm512_testn_epi32_mask(hi, _mm512_set1_epi32(0x7F));
  const __m512i nan = _mm512_mask_or_epi32(hi, no_payload, hi, _mm512_set1_epi32(0x40));
  const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __m512i h = _mm512_mask_blend_epi32(is_nan, rounded, nan);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(h));
}

int64_t AdamBody(const AdamConsts& c, float* w, float* m, float* v, const float* g, uint16_t* bf16,
                 int64_t n) {
  const __m512 scale = _mm512_set1_ps(c.scale), l2 = _mm512_set1_ps(c.l2);
  const __m512 b1 = _mm512_set1_ps(c.beta1), b2 = _mm512_set1_ps(c.beta2);
  const __m512 omb1 = _mm512_set1_ps(c.one_minus_beta1), omb2 = _mm512_set1_ps(c.one_minus_beta2);
  const __m512 c1 = _mm512_set1_ps(c.c1), c2 = _mm512_set1_ps(c.c2), eps = _mm512_set1_ps(c.eps);
  const __m512 lr = _mm512_set1_ps(c.lr), dec = _mm512_set1_ps(c.decoupled);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 wi = _mm512_loadu_ps(w + i);
    const __m512 gi =
        _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(g + i), scale), _mm512_mul_ps(l2, wi));
    const __m512 mi =
        _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(m + i)), _mm512_mul_ps(omb1, gi));
    const __m512 vi = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(v + i)),
                                    _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    const __m512 den = _mm512_add_ps(_mm512_sqrt_ps(_mm512_mul_ps(vi, c2)), eps);
    const __m512 step =
        _mm512_add_ps(_mm512_div_ps(_mm512_mul_ps(mi, c1), den), _mm512_mul_ps(dec, wi));
    const __m512 wn = _mm512_sub_ps(wi, _mm512_mul_ps(lr, step));
    _mm512_storeu_ps(w + i, wn);
    if (bf16) StoreBf16(bf16 + i, wn);
  }
  return i;
}

int64_t SgdBody(const SgdConsts& c, float* w, float* m, const float* g, uint16_t* bf16, int64_t n) {
  const __m512 scale = _mm512_set1_ps(c.scale), wd = _mm512_set1_ps(c.weight_decay);
  const __m512 mu = _mm512_set1_ps(c.momentum), lr = _mm512_set1_ps(c.lr);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 wi = _mm512_loadu_ps(w + i);
    const __m512 gi =
        _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(g + i), scale), _mm512_mul_ps(wd, wi));
    __m512 u = gi;
    if (m) {
      const __m512 mi = _mm512_add_ps(_mm512_mul_ps(mu, _mm512_loadu_ps(m + i)), gi);
      _mm512_storeu_ps(m + i, mi);
      u = c.nesterov ? _mm512_add_ps(gi, _mm512_mul_ps(mu, mi)) : mi;
    }
    const __m512 wn = _mm512_sub_ps(wi, _mm512_mul_ps(lr, u));
    _mm512_storeu_ps(w + i, wn);
    if (bf16) StoreBf16(bf16 + i, wn);
  }
  return i;
}

int64_t ToBF16Body(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) StoreBf16(dst + i, _mm512_loadu_ps(src + i));
  return i;
}

}  // namespace
}  // namespace strata::optim::internal

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace strata::optim::internal {

void AdamAvx512(const AdamConsts& c, float* w, float* m, float* v, const float* g, uint16_t* bf16,
                int64_t n) {
  const int64_t i = AdamBody(c, w, m, v, g, bf16, n);
  AdamScalar(c, w + i, m + i, v + i, g + i, bf16 ? bf16 + i : nullptr, n - i);
}

void SgdAvx512(const SgdConsts& c, float* w, float* m, const float* g, uint16_t* bf16, int64_t n) {
  const int64_t i = SgdBody(c, w, m, g, bf16, n);
  SgdScalar(c, w + i, m ? m + i : nullptr, g + i, bf16 ? bf16 + i : nullptr, n - i);
}

void ToBF16Avx512(const float* src, uint16_t* dst, int64_t n) {
  const int64_t i = ToBF16Body(src, dst, n);
  ConvertF32ToBF16(src + i, dst + i, static_cast<size_t>(n - i));
}

}  // namespace strata::optim::internal

#else  // not x86-64 GCC/Clang: IsaSupported(kAvx512) is false, so these are never called

namespace strata::optim::internal {
void AdamAvx512(const AdamConsts&, float*, float*, float*, const float*, uint16_t*, int64_t) {
  STRATA_CHECK(false) << "no AVX-512 path in this build";
}
void SgdAvx512(const SgdConsts&, float*, float*, const float*, uint16_t*, int64_t) {
  STRATA_CHECK(false) << "no AVX-512 path in this build";
}
void ToBF16Avx512(const float*, uint16_t*, int64_t) {
  STRATA_CHECK(false) << "no AVX-512 path in this build";
}
}  // namespace strata::optim::internal

#endif

#pragma GCC diagnostic pop
