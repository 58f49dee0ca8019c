// op_helpers.h: what the CPU op files (ops.cc, norm_ops.cc, attention_ops.cc, ...) share: the
// dispatch of CUDA tensors to cuda_ops.cu and the precondition checks and accessors of the CPU
// loops. Internal to trainer/ops; nothing outside it should include this.
#pragma once

#include <cstdint>

#include "common/tensor.h"
#include "trainer/ops/cuda_ops.h"
#include "trainer/ops/exec.h"

#if STRATA_HAVE_CUDA
// A CUDA tensor runs on ex's stream and cuBLAS handle, which must be on the tensor's device (a
// CPU Exec has neither: the launch would go to the legacy stream and allocate host memory).
#define STRATA_DISPATCH(t, call)                                                         \
  if ((t).is_cuda()) {                                                                   \
    STRATA_CHECK(ex.device == (t).device())                                              \
        << #call ": tensor on " << (t).device().ToString() << ", Exec on " << ex.device.ToString(); \
    return cuda::call;                                                                   \
  }
#else
#define STRATA_DISPATCH(t, call)                                  \
  do {                                                            \
    (void)ex;                                                     \
    STRATA_CHECK(!(t).is_cuda()) << "built without CUDA: " #call; \
  } while (0)
#endif

namespace strata::ops::internal {

inline void CheckF32(const Tensor& t, const char* what) {
  STRATA_CHECK(t.defined()) << what << " is undefined";
  STRATA_CHECK(t.dtype() == DType::kF32) << what << " must be f32, is " << t.dtype();
  STRATA_CHECK(t.is_contiguous()) << what << " must be contiguous";
}
inline void CheckSame(const Tensor& a, const Tensor& b, const char* what) {
  STRATA_CHECK(a.shape() == b.shape())
      << what << ": " << ShapeToString(a.shape()) << " vs " << ShapeToString(b.shape());
}
inline const float* F(const Tensor& t) { return t.data_as<float>(); }
inline float* W(const Tensor& t) { return t.data_as<float>(); }
inline int64_t Rows(const Tensor& t) { return t.dim() == 0 ? 1 : t.numel() / t.size(t.dim() - 1); }
inline int64_t Cols(const Tensor& t) { return t.dim() == 0 ? 1 : t.size(t.dim() - 1); }
inline int64_t IdAt(const Tensor& ids, int64_t i) {
  return ids.dtype() == DType::kI64 ? ids.data_as<int64_t>()[i] : ids.data_as<int32_t>()[i];
}
// out[0..n) = in[0..n) rounded as a tensor core at precision p rounds its inputs: to nearest
// (ties to even) with 7 (bf16) or 10 (tf32) mantissa bits; copied as it is at fp32. in may be
// out (matmul_ops.cc).
void RoundForMatmul(MatmulPrecision p, const float* in, float* out, int64_t n);
// A rounded copy of contiguous f32 t, or t itself at fp32.
Tensor RoundedForMatmul(const Exec& ex, const Tensor& t);
// y = softmax(x) over n entries (a fast exp, summed in double, as every CPU softmax here);
// returns log(sum(exp(x))).
double SoftmaxRow(const float* x, float* y, int64_t n);
// dx = y * (dy - <y, dy>) over n entries (the dot product in double): softmax's backward.
void SoftmaxBackwardRow(const float* y, const float* dy, float* dx, int64_t n);

}  // namespace strata::ops::internal
