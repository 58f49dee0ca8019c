// kernels_avx2.cc: the AVX2 path of the optimizer kernels (8 floats a step, tails on the scalar
// path). Compiled for AVX2 by the pragma below, called only when the CPU has it (kernels.cc).
// The same operations as the scalar loops, in the same order, without FMA: the same bits.
#include <immintrin.h>

#include <cstdint>

#include "common/check.h"
#include "common/dtype.h"
#include "common/optim/internal.h"

#if defined(__x86_64__) && defined(__GNUC__)

#if defined(__clang__)  // clang ignores GCC's target pragma
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif

namespace strata::optim::internal {
namespace {

// common/dtype.h's FloatToBF16 on 8 lanes: round to nearest even; a NaN is truncated and keeps
// a payload bit so it cannot become inf.
inline __m128i Bf16x8(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i hi = _mm256_srli_epi32(bits, 16);
  const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  const __m256i no_payload =
      _mm256_cmpeq_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(0x7F)), _mm256_setzero_si256());
  const __m256i nan = _mm256_or_si256(hi, _mm256_and_si256(no_payload, _mm256_set1_epi32(0x40)));
  const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  const __m256i h = _mm256_blendv_epi8(rounded, nan, is_nan);
  return _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

inline void StoreBf16(uint16_t* dst, __m256 x) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), Bf16x8(x));
}

int64_t AdamBody(const AdamConsts& c, float* w, float* m, float* v, const float* g, uint16_t* bf16,
                 int64_t n) {
  const __m256 scale = _mm256_set1_ps(c.scale), l2 = _mm256_set1_ps(c.l2);
  const __m256 b1 = _mm256_set1_ps(c.beta1), b2 = _mm256_set1_ps(c.beta2);
  const __m256 omb1 = _mm256_set1_ps(c.one_minus_beta1), omb2 = _mm256_set1_ps(c.one_minus_beta2);
  const __m256 c1 = _mm256_set1_ps(c.c1), c2 = _mm256_set1_ps(c.c2), eps = _mm256_set1_ps(c.eps);
  const __m256 lr = _mm256_set1_ps(c.lr), dec = _mm256_set1_ps(c.decoupled);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 wi = _mm256_loadu_ps(w + i);
    const __m256 gi =
        _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(g + i), scale), _mm256_mul_ps(l2, wi));
    const __m256 mi =
        _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(omb1, gi));
    const __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)),
                                    _mm256_mul_ps(_mm256_mul_ps(omb2, gi), gi));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    const __m256 den = _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(vi, c2)), eps);
    const __m256 step =
        _mm256_add_ps(_mm256_div_ps(_mm256_mul_ps(mi, c1), den), _mm256_mul_ps(dec, wi));
    const __m256 wn = _mm256_sub_ps(wi, _mm256_mul_ps(lr, step));
    _mm256_storeu_ps(w + i, wn);
    if (bf16) StoreBf16(bf16 + i, wn);
  }
  return i;
}

int64_t SgdBody(const SgdConsts& c, float* w, float* m, const float* g, uint16_t* bf16, int64_t n) {
  const __m256 scale = _mm256_set1_ps(c.scale), wd = _mm256_set1_ps(c.weight_decay);
  const __m256 mu = _mm256_set1_ps(c.momentum), lr = _mm256_set1_ps(c.lr);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 wi = _mm256_loadu_ps(w + i);
    const __m256 gi =
        _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(g + i), scale), _mm256_mul_ps(wd, wi));
    __m256 u = gi;
    if (m) {
      const __m256 mi = _mm256_add_ps(_mm256_mul_ps(mu, _mm256_loadu_ps(m + i)), gi);
      _mm256_storeu_ps(m + i, mi);
      u = c.nesterov ? _mm256_add_ps(gi, _mm256_mul_ps(mu, mi)) : mi;
    }
    const __m256 wn = _mm256_sub_ps(wi, _mm256_mul_ps(lr, u));
    _mm256_storeu_ps(w + i, wn);
    if (bf16) StoreBf16(bf16 + i, wn);
  }
  return i;
}

int64_t ToBF16Body(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) StoreBf16(dst + i, _mm256_loadu_ps(src + i));
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

void AdamAvx2(const AdamConsts& c, float* w, float* m, float* v, const float* g, uint16_t* bf16,
              int64_t n) {
  const int64_t i = AdamBody(c, w, m, v, g, bf16, n);
  AdamScalar(c, w + i, m + i, v + i, g + i, bf16 ? bf16 + i : nullptr, n - i);
}

void SgdAvx2(const SgdConsts& c, float* w, float* m, const float* g, uint16_t* bf16, int64_t n) {
  const int64_t i = SgdBody(c, w, m, g, bf16, n);
  SgdScalar(c, w + i, m ? m + i : nullptr, g + i, bf16 ? bf16 + i : nullptr, n - i);
}

void ToBF16Avx2(const float* src, uint16_t* dst, int64_t n) {
  const int64_t i = ToBF16Body(src, dst, n);
  ConvertF32ToBF16(src + i, dst + i, static_cast<size_t>(n - i));
}

}  // namespace strata::optim::internal

#else  // not x86-64 GCC/Clang: IsaSupported(kAvx2) is false, so these are never called

namespace strata::optim::internal {
void AdamAvx2(const AdamConsts&, float*, float*, float*, const float*, uint16_t*, int64_t) {
  STRATA_CHECK(false) << "no AVX2 path in this build";
}
void SgdAvx2(const SgdConsts&, float*, float*, const float*, uint16_t*, int64_t) {
  STRATA_CHECK(false) << "no AVX2 path in this build";
}
void ToBF16Avx2(const float*, uint16_t*, int64_t) {
  STRATA_CHECK(false) << "no AVX2 path in this build";
}
}  // namespace strata::optim::internal

#endif
