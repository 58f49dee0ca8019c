// cuda_tp_ops.cu: CUDA versions of tp_ops.cc (a vocabulary split over tensor-parallel ranks).
// One block per row, threads striding over its columns; shapes were checked by tp_ops.cc.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "common/cuda_check.h"
#include "trainer/ops/cuda_ops.h"

namespace strata::ops::cuda {
namespace {

constexpr int kThreads = 128;

template <typename Id>
__global__ void GatherRangeKernel(const float* table, const Id* ids, int64_t first, int64_t slice,
                                  int64_t d, float* rows) {
  const int64_t i = blockIdx.x, id = static_cast<int64_t>(ids[i]) - first;
  const bool mine = id >= 0 && id < slice;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) rows[i * d + j] = mine ? table[id * d + j] : 0.0f;
}
template <typename Id>
__global__ void ScatterAddRangeKernel(const float* drows, const Id* ids, int64_t first,
                                      int64_t slice, int64_t d, float* dtable) {
  const int64_t i = blockIdx.x, id = static_cast<int64_t>(ids[i]) - first;
  if (id < 0 || id >= slice) return;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) atomicAdd(&dtable[id * d + j], drows[i * d + j]);
}

// Block-wide reductions through shared memory (blockDim.x == kThreads).
__device__ float BlockReduce(float v, bool max) {
  __shared__ float s[kThreads];
  s[threadIdx.x] = v;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) s[threadIdx.x] = max ? fmaxf(s[threadIdx.x], s[threadIdx.x + w]) : s[threadIdx.x] + s[threadIdx.x + w];
    __syncthreads();
  }
  const float out = s[0];
  __syncthreads();
  return out;
}

__global__ void LogitStatsKernel(const float* logits, const int32_t* targets, int64_t first,
                                 int64_t v, float* row_max, float* target_logit) {
  const int64_t r = blockIdx.x;
  const float* x = logits + r * v;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = BlockReduce(mx, true);
  if (threadIdx.x == 0) {
    row_max[r] = mx;
    const int64_t t = static_cast<int64_t>(targets[r]) - first;
    target_logit[r] = targets[r] >= 0 && t >= 0 && t < v ? x[t] : 0.0f;
  }
}
__global__ void SumExpKernel(const float* logits, const float* row_max, int64_t v, float* sum_exp) {
  const int64_t r = blockIdx.x;
  const float* x = logits + r * v;
  float s = 0;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) s += expf(x[j] - row_max[r]);
  s = BlockReduce(s, false);
  if (threadIdx.x == 0) sum_exp[r] = s;
}
__global__ void CrossEntropyGradKernel(const float* logits, const int32_t* targets, int64_t first,
                                       const float* row_max, const float* sum_exp, float g,
                                       int64_t v, float* d) {
  const int64_t r = blockIdx.x, t = static_cast<int64_t>(targets[r]) - first;
  const bool valid = targets[r] >= 0;
  const float mx = row_max[r], inv = 1.0f / sum_exp[r];
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    d[r * v + j] = valid ? (expf(logits[r * v + j] - mx) * inv - (j == t ? 1.0f : 0.0f)) * g : 0.0f;
  }
}

__global__ void TransposeLeadingKernel(const float* in, int64_t a, int64_t b, int64_t r, float* out) {
  const int64_t n = a * b * r;
  for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
    const int64_t e = k % r, ij = k / r, i = ij / b, j = ij % b;
    out[(j * a + i) * r + e] = in[k];
  }
}

cudaStream_t S(const Exec& ex) { return static_cast<cudaStream_t>(ex.stream); }
void Launched() { CUDA_CHECK_FATAL(cudaGetLastError()); }

}  // namespace

void TransposeLeading(const Exec& ex, const Tensor& in, int64_t a, int64_t b, const Tensor& out) {
  const int64_t n = in.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 65535 * 4);
  TransposeLeadingKernel<<<blocks, 256, 0, S(ex)>>>(in.data_as<float>(), a, b, n / (a * b), out.data_as<float>());
  Launched();
}

void EmbeddingGatherRange(const Exec& ex, const Tensor& table, const Tensor& ids, int64_t first,
                          const Tensor& rows) {
  const int64_t n = ids.numel(), d = table.size(1), slice = table.size(0);
  if (n == 0) return;
  if (ids.dtype() == DType::kI64) {
    GatherRangeKernel<<<n, kThreads, 0, S(ex)>>>(table.data_as<float>(), ids.data_as<int64_t>(), first, slice, d, rows.data_as<float>());
  } else {
    GatherRangeKernel<<<n, kThreads, 0, S(ex)>>>(table.data_as<float>(), ids.data_as<int32_t>(), first, slice, d, rows.data_as<float>());
  }
  Launched();
}

void EmbeddingScatterAddRange(const Exec& ex, const Tensor& drows, const Tensor& ids,
                              int64_t first, const Tensor& dtable) {
  const int64_t n = ids.numel(), d = dtable.size(1), slice = dtable.size(0);
  if (n == 0) return;
  if (ids.dtype() == DType::kI64) {
    ScatterAddRangeKernel<<<n, kThreads, 0, S(ex)>>>(drows.data_as<float>(), ids.data_as<int64_t>(), first, slice, d, dtable.data_as<float>());
  } else {
    ScatterAddRangeKernel<<<n, kThreads, 0, S(ex)>>>(drows.data_as<float>(), ids.data_as<int32_t>(), first, slice, d, dtable.data_as<float>());
  }
  Launched();
}

void VocabLogitStats(const Exec& ex, const Tensor& logits, const Tensor& targets, int64_t first,
                     const Tensor& row_max, const Tensor& target_logit) {
  const int64_t v = logits.size(logits.dim() - 1), n = logits.numel() / v;
  if (n == 0) return;
  LogitStatsKernel<<<n, kThreads, 0, S(ex)>>>(logits.data_as<float>(), targets.data_as<int32_t>(), first, v,
                                              row_max.data_as<float>(), target_logit.data_as<float>());
  Launched();
}

void VocabSumExp(const Exec& ex, const Tensor& logits, const Tensor& row_max,
                 const Tensor& sum_exp) {
  const int64_t v = logits.size(logits.dim() - 1), n = logits.numel() / v;
  if (n == 0) return;
  SumExpKernel<<<n, kThreads, 0, S(ex)>>>(logits.data_as<float>(), row_max.data_as<float>(), v, sum_exp.data_as<float>());
  Launched();
}

void VocabCrossEntropyGrad(const Exec& ex, const Tensor& logits, const Tensor& targets,
                           int64_t first, const Tensor& row_max, const Tensor& sum_exp, float g,
                           const Tensor& dlogits) {
  const int64_t v = logits.size(logits.dim() - 1), n = logits.numel() / v;
  if (n == 0) return;
  CrossEntropyGradKernel<<<n, kThreads, 0, S(ex)>>>(logits.data_as<float>(), targets.data_as<int32_t>(), first,
                                                    row_max.data_as<float>(), sum_exp.data_as<float>(), g, v,
                                                    dlogits.data_as<float>());
  Launched();
}

}  // namespace strata::ops::cuda
