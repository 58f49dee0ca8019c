// cuda_ops.cu: CUDA implementations of ops.h. Kernels first, launchers after (llm.c style).
// Every launcher runs on ex.stream and checks the launch; shapes were checked by ops.cc.
// GEMMs go to cuBLAS (row-major operands passed as their column-major transposes).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "common/cuda_check.h"
#include "trainer/ops/cublas_api.h"
#include "trainer/ops/cuda_ops.h"
#include "trainer/ops/rng.h"

namespace strata::ops::cuda {
namespace {

constexpr int kThreads = 256;

// ----------------------------------------------------------------------------------------------
// Kernels

__device__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}
__device__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  return v;
}
// Block-wide sum/max for blockDim.x a multiple of 32 (<= 1024); every thread gets the result.
__device__ float BlockSum(float v) {
  __shared__ float shared[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = WarpSum(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < blockDim.x / 32 ? shared[lane] : 0.0f;
  return WarpSum(v);
}
__device__ float BlockMax(float v) {
  __shared__ float shared[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < blockDim.x / 32 ? shared[lane] : -INFINITY;
  return WarpMax(v);
}

__global__ void FillKernel(float* x, float v, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) x[i] = v;
}
__global__ void AddKernel(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) out[i] = a[i] + b[i];
}
__global__ void MulKernel(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) out[i] = a[i] * b[i];
}
__global__ void ScaleKernel(float* x, float alpha, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) x[i] *= alpha;
}
__global__ void AxpyKernel(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) y[i] += alpha * x[i];
}
// Sums (or sums of squares) into a double with one atomic per block.
__global__ void SumKernel(const float* x, int64_t n, bool squares, double* out) {
  double acc = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    acc += squares ? (double)x[i] * x[i] : (double)x[i];
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, o);
  __shared__ double shared[32];
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0;
    for (int w = 0; w < blockDim.x / 32; ++w) s += shared[w];
    atomicAdd(out, s);
  }
}
__global__ void AddBiasKernel(float* x, const float* bias, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) x[i] += bias[i % cols];
}
// Column sums over the rows, deterministic and parallel in two passes. The first: a block per
// (tile of 32 columns, chunk of rows); its 8 rows of threads stride the chunk's rows (a warp
// reads 32 adjacent floats of a row) and their sums are added in thread-row order into
// partial[out][chunk][column]. The second: a thread per column adds its chunks in chunk order
// into the output. The same inputs give the same bits on every run; no atomics.
constexpr int kColumnTile = 32, kColumnRows = 8;
// Term functors: add row r's contribution to column c into s[0..kOut).
struct BiasGradTerm {
  static constexpr int kOut = 1;
  const float* dy;
  __device__ void operator()(int64_t r, int64_t c, int64_t cols, float* s) const { s[0] += dy[r * cols + c]; }
};
struct LayerNormWeightTerm {  // dgamma += dy * x_hat, dbeta += dy
  static constexpr int kOut = 2;
  const float *dy, *x, *mean, *rstd;
  __device__ void operator()(int64_t r, int64_t c, int64_t cols, float* s) const {
    const float g = dy[r * cols + c];
    s[0] += g * ((x[r * cols + c] - mean[r]) * rstd[r]);
    s[1] += g;
  }
};
template <typename Term>
__global__ void ColumnPartialKernel(Term term, float* partial, int64_t rows, int64_t cols, int64_t chunk_rows) {
  __shared__ float tile[Term::kOut][kColumnRows][kColumnTile + 1];
  const int64_t c = blockIdx.x * (int64_t)kColumnTile + threadIdx.x;
  const int64_t begin = blockIdx.y * chunk_rows, end = min(begin + chunk_rows, rows);
  float s[Term::kOut] = {};
  if (c < cols) {
    for (int64_t r = begin + threadIdx.y; r < end; r += kColumnRows) term(r, c, cols, s);
  }
  for (int k = 0; k < Term::kOut; ++k) tile[k][threadIdx.y][threadIdx.x] = s[k];
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  for (int k = 0; k < Term::kOut; ++k) {
    float t = 0;
    for (int y = 0; y < kColumnRows; ++y) t += tile[k][y][threadIdx.x];
    partial[((int64_t)k * gridDim.y + blockIdx.y) * cols + c] = t;
  }
}
__global__ void ColumnFinishKernel(const float* partial, int64_t chunks, int64_t cols, float* out0, float* out1) {
  const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0;
  for (int64_t k = 0; k < chunks; ++k) s += partial[k * cols + c];
  out0[c] += s;
  if (out1 == nullptr) return;
  s = 0;
  for (int64_t k = 0; k < chunks; ++k) s += partial[(chunks + k) * cols + c];
  out1[c] += s;
}
__global__ void ReluKernel(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) y[i] = x[i] > 0 ? x[i] : 0.0f;
}
__global__ void ReluBackwardKernel(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) dx[i] = x[i] > 0 ? dy[i] : 0.0f;
}
constexpr float kGeluK = 0.7978845608028654f, kGeluC = 0.044715f;
__global__ void GeluKernel(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(kGeluK * (v + kGeluC * v * v * v)));
  }
}
__global__ void GeluBackwardKernel(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = x[i];
    const float t = tanhf(kGeluK * (v + kGeluC * v * v * v));
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluC * v * v));
  }
}
// One block per row.
__global__ void __launch_bounds__(1024) LayerNormKernel(const float* x, const float* g, const float* b, float eps, float* y,
                                float* mean, float* rstd, int64_t d) {
  const float* xr = x + blockIdx.x * d;
  float s = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) s += xr[i];
  const float mu = BlockSum(s) / d;
  float v = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) v += (xr[i] - mu) * (xr[i] - mu);
  const float rs = rsqrtf(BlockSum(v) / d + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) y[blockIdx.x * d + i] = (xr[i] - mu) * rs * g[i] + b[i];
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = rs;
  }
}
// dx only; dgamma and dbeta are LayerNormWeightTerm's column sums (deterministic, no atomics).
__global__ void __launch_bounds__(1024) LayerNormBackwardKernel(const float* dy, const float* x, const float* g, const float* mean,
                                        const float* rstd, float* dx, int64_t d) {
  const int64_t r = blockIdx.x;
  const float m = mean[r], rs = rstd[r];
  float s1 = 0, s2 = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float xh = (x[r * d + i] - m) * rs, dxh = dy[r * d + i] * g[i];
    s1 += dxh;
    s2 += dxh * xh;
  }
  const float a = BlockSum(s1) / d;
  const float c = BlockSum(s2) / d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float xh = (x[r * d + i] - m) * rs;
    dx[r * d + i] = rs * (dy[r * d + i] * g[i] - a - xh * c);
  }
}
// One block per row; `valid` entries (the rest are written as 0): causal masking when
// row_mod > 0 keeps columns <= (row % row_mod), scaled by `scale` first.
__global__ void __launch_bounds__(1024) SoftmaxKernel(const float* x, float* y, int64_t d, int64_t row_mod, float scale) {
  const int64_t r = blockIdx.x;
  const int64_t valid = row_mod > 0 ? (r % row_mod) + 1 : d;
  const float* xr = x + r * d;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < valid; i += blockDim.x) mx = fmaxf(mx, xr[i] * scale);
  mx = BlockMax(mx);
  float s = 0;
  for (int64_t i = threadIdx.x; i < valid; i += blockDim.x) s += expf(xr[i] * scale - mx);
  const float inv = 1.0f / BlockSum(s);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) y[r * d + i] = i < valid ? expf(xr[i] * scale - mx) * inv : 0.0f;
}
__global__ void __launch_bounds__(1024) SoftmaxBackwardKernel(const float* y, const float* dy, float* dx, int64_t d, float scale) {
  const int64_t r = blockIdx.x;
  float dot = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) dot += y[r * d + i] * dy[r * d + i];
  dot = BlockSum(dot);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) dx[r * d + i] = scale * y[r * d + i] * (dy[r * d + i] - dot);
}
// qkv [B*T, 3C] <-> q/k/v [B, H, T, hd]; one thread per element of one of q, k, v.
__global__ void SplitHeadsKernel(const float* qkv, float* q, float* k, float* v, int64_t b, int64_t h,
                                 int64_t t, int64_t hd, bool reverse) {
  const int64_t n = b * h * t * hd, c = h * hd;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < 3 * n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t w = i / n, e = i % n;
    const int64_t j = e % hd, s = (e / hd) % t, hh = (e / (hd * t)) % h, bb = e / (hd * t * h);
    float* dst = w == 0 ? q : (w == 1 ? k : v);
    const int64_t src = (bb * t + s) * 3 * c + w * c + hh * hd + j;
    if (reverse) {
      const_cast<float*>(qkv)[src] = dst[e];
    } else {
      dst[e] = qkv[src];
    }
  }
}
__global__ void MergeHeadsKernel(float* y, float* out, int64_t b, int64_t h, int64_t t, int64_t hd, bool reverse) {
  const int64_t n = b * h * t * hd;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t j = e % hd, s = (e / hd) % t, hh = (e / (hd * t)) % h, bb = e / (hd * t * h);
    const int64_t o = (bb * t + s) * h * hd + hh * hd + j;
    if (reverse) {
      y[e] = out[o];
    } else {
      out[o] = y[e];
    }
  }
}
struct LossAccum {
  double sum;
  int count;
};
__global__ void CountValidKernel(const int32_t* targets, int64_t n, LossAccum* acc) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    if (targets[i] >= 0) atomicAdd(&acc->count, 1);
  }
}
// One block per row: loss += logsumexp - logit[target]; dlogits = (softmax - onehot) * scale / count.
__global__ void __launch_bounds__(1024) CrossEntropyKernel(const float* logits, const int32_t* targets, float* d, int64_t v,
                                   float grad_scale, LossAccum* acc) {
  const int64_t r = blockIdx.x;
  const float* x = logits + r * v;
  const int32_t t = targets[r];
  if (t < 0) {
    for (int64_t i = threadIdx.x; i < v; i += blockDim.x) d[r * v + i] = 0.0f;
    return;
  }
  if (t >= v) {  // a bug upstream, as on the CPU: stop loudly rather than read past the row
    if (threadIdx.x == 0) {
      printf("strata cross-entropy kernel: target %d of row %lld >= vocab %lld\n", t, (long long)r, (long long)v);
    }
    __trap();
  }
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < v; i += blockDim.x) mx = fmaxf(mx, x[i]);
  mx = BlockMax(mx);
  float s = 0;
  for (int64_t i = threadIdx.x; i < v; i += blockDim.x) s += expf(x[i] - mx);
  s = BlockSum(s);
  const float g = grad_scale / acc->count;
  for (int64_t i = threadIdx.x; i < v; i += blockDim.x) d[r * v + i] = (expf(x[i] - mx) / s - (i == t)) * g;
  if (threadIdx.x == 0) atomicAdd(&acc->sum, (double)(logf(s) + mx - x[t]));
}
// A block's double sum, added to `out` by its first thread: one atomic per block.
__device__ void BlockAtomicAdd(double v, double* out) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  __shared__ double shared[32];
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x != 0) return;
  double s = 0;
  for (int w = 0; w < blockDim.x / 32; ++w) s += shared[w];
  atomicAdd(out, s);
}
__global__ void MseKernel(const float* p, const float* t, float* d, int64_t n, float g, LossAccum* acc) {
  double local = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float e = p[i] - t[i];
    local += (double)e * e;
    d[i] = g * e;
  }
  BlockAtomicAdd(local, &acc->sum);
}
__global__ void BceKernel(const float* z, const float* y, float* d, int64_t n, float g, LossAccum* acc) {
  double local = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float zi = z[i];
    local += fmaxf(zi, 0.0f) - zi * y[i] + log1pf(expf(-fabsf(zi)));
    d[i] = (1.0f / (1.0f + expf(-zi)) - y[i]) * g;
  }
  BlockAtomicAdd(local, &acc->sum);
}
// An id outside the table is our bug (the data sources map every id into its table), so, like
// the CPU op's STRATA_CHECK, the kernel stops loudly: it prints the id and traps, which makes
// the launch fail with cudaErrorLaunchFailure at the next checked call instead of reading or
// writing outside the table.
template <typename Id>
__device__ int64_t CheckedRow(const Id* ids, int64_t i, int64_t vocab) {
  const int64_t id = static_cast<int64_t>(ids[i]);
  if (id < 0 || id >= vocab) {
    printf("strata embedding kernel: id %lld at position %lld outside [0, %lld)\n", (long long)id,
           (long long)i, (long long)vocab);
    __trap();
  }
  return id;
}
template <typename Id>
__global__ void GatherKernel(const float* table, const Id* ids, float* rows, int64_t n, int64_t d,
                             int64_t vocab) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * d; i += (int64_t)gridDim.x * blockDim.x) {
    rows[i] = table[CheckedRow(ids, i / d, vocab) * d + i % d];
  }
}
template <typename Id>
__global__ void ScatterAddKernel(const float* drows, const Id* ids, float* dtable, int64_t n, int64_t d,
                                 int64_t vocab) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * d; i += (int64_t)gridDim.x * blockDim.x) {
    atomicAdd(&dtable[CheckedRow(ids, i / d, vocab) * d + i % d], drows[i]);
  }
}
__global__ void DropoutKernel(const float* x, float* y, int64_t n, float p, uint64_t seed) {
  const float scale = 1.0f / (1.0f - p);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    y[i] = rng::Uniform(seed, i) >= p ? x[i] * scale : 0.0f;
  }
}
__global__ void SgdKernel(float* w, const float* g, float* v, int64_t n, float lr, float mom, float wd, bool nesterov) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float gi = g[i] + wd * w[i];
    v[i] = mom * v[i] + gi;
    w[i] -= lr * (nesterov ? gi + mom * v[i] : v[i]);
  }
}
__global__ void AdamWKernel(float* w, const float* g, float* m, float* v, int64_t n, float lr, float b1,
                            float b2, float eps, float wd, float c1, float c2) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    w[i] -= lr * ((m[i] * c1) / (sqrtf(v[i] * c2) + eps) + wd * w[i]);
  }
}
template <typename Src, typename Dst>
__global__ void CastKernel(const Src* src, Dst* dst, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    if constexpr (std::is_same_v<Dst, float>) {
      dst[i] = static_cast<float>(src[i]);
    } else {
      dst[i] = Dst(src[i]);
    }
  }
}

// ----------------------------------------------------------------------------------------------
// Launchers

cudaStream_t S(const Exec& ex) { return static_cast<cudaStream_t>(ex.stream); }
int Blocks(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 4)); }
int RowThreads(int64_t d) { return d >= 1024 ? 1024 : (d >= 256 ? 256 : (d >= 128 ? 128 : 32)); }
const float* F(const Tensor& t) { return t.data_as<float>(); }
float* W(const Tensor& t) { return t.data_as<float>(); }
int64_t Rows(const Tensor& t) { return t.numel() / t.size(t.dim() - 1); }
int64_t Cols(const Tensor& t) { return t.size(t.dim() - 1); }
void CheckLaunch() { CUDA_CHECK_FATAL(cudaGetLastError()); }
// `grid` is an int64 count of blocks (one per row for the row kernels): more than a grid's x
// dimension holds is a bug, not something to wrap around.
#define STRATA_LAUNCH(kernel, grid, block, ex, ...)                                       \
  do {                                                                                    \
    const int64_t strata_grid = (grid);                                                   \
    STRATA_CHECK(strata_grid <= INT32_MAX) << #kernel ": " << strata_grid << " blocks";   \
    if (strata_grid > 0) kernel<<<static_cast<unsigned>(strata_grid), (block), 0, S(ex)>>>(__VA_ARGS__); \
    CheckLaunch();                                                                        \
  } while (0)

void CublasCheck(cublasStatus_t s) { STRATA_CHECK(s == CUBLAS_STATUS_SUCCESS) << "cuBLAS error " << static_cast<int>(s); }

// Scratch accumulator on the device, read back after the stream drains.
class Accumulator {
 public:
  explicit Accumulator(const Exec& ex) : ex_(ex), t_(NewTensor(ex, {static_cast<int64_t>(sizeof(LossAccum))}, DType::kU8)) {
    p_ = static_cast<LossAccum*>(t_.data());
    CUDA_CHECK_FATAL(cudaMemsetAsync(p_, 0, sizeof(LossAccum), S(ex)));
  }
  LossAccum* get() { return p_; }
  LossAccum Read() {
    LossAccum host{};
    CUDA_CHECK_FATAL(cudaMemcpyAsync(&host, p_, sizeof(host), cudaMemcpyDeviceToHost, S(ex_)));
    CUDA_CHECK_FATAL(cudaStreamSynchronize(S(ex_)));
    return host;
  }

 private:
  const Exec& ex_;
  Tensor t_;  // NewTensor: out of memory throws OutOfMemory, like every op allocation
  LossAccum* p_;
};

}  // namespace

void Matmul(const Exec& ex, const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a,
            bool trans_b, float alpha, float beta) {
  const int o = a.dim() - 2;
  const int64_t batch = a.dim() == 3 ? a.size(0) : 1;
  const int64_t m = c.size(o), n = c.size(o + 1), k = trans_a ? a.size(o) : a.size(o + 1);
  if (m * n * batch == 0) return;  // nothing to write (cuBLAS would reject a zero leading dimension)
  if (k == 0) {                    // an empty sum: C = beta * C
    cuda::Scale(ex, c, beta);
    return;
  }
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  const cublasHandle_t handle = static_cast<cublasHandle_t>(ex.cublas);
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (ex.matmul == MatmulPrecision::kFp32) {
    CublasCheck(ex.cublas_api->sgemm_strided_batched(handle, op_b, op_a, n, m, k, &alpha, F(b), b.size(o + 1), k * n,
                                                     F(a), a.size(o + 1), m * k, &beta, W(c), n, m * n, batch));
    return;
  }
  // fp32 storage, the tensor cores' rounded inputs, fp32 accumulation (exec.h).
  const cublasComputeType_t compute =
      ex.matmul == MatmulPrecision::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_FAST_16BF;
  CublasCheck(ex.cublas_api->gemm_strided_batched_ex(
      handle, op_b, op_a, n, m, k, &alpha, F(b), CUDA_R_32F, b.size(o + 1), k * n, F(a), CUDA_R_32F,
      a.size(o + 1), m * k, &beta, W(c), CUDA_R_32F, n, m * n, batch, compute, CUBLAS_GEMM_DEFAULT));
}

void Fill(const Exec& ex, const Tensor& x, float value) { STRATA_LAUNCH(FillKernel, Blocks(x.numel()), kThreads, ex, W(x), value, x.numel()); }
void Copy(const Exec& ex, const Tensor& src, const Tensor& dst) {
  CUDA_CHECK_FATAL(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice, S(ex)));
}
void Add(const Exec& ex, const Tensor& a, const Tensor& b, const Tensor& out) { STRATA_LAUNCH(AddKernel, Blocks(a.numel()), kThreads, ex, F(a), F(b), W(out), a.numel()); }
void Mul(const Exec& ex, const Tensor& a, const Tensor& b, const Tensor& out) { STRATA_LAUNCH(MulKernel, Blocks(a.numel()), kThreads, ex, F(a), F(b), W(out), a.numel()); }
void Scale(const Exec& ex, const Tensor& x, float alpha) { STRATA_LAUNCH(ScaleKernel, Blocks(x.numel()), kThreads, ex, W(x), alpha, x.numel()); }
void Axpy(const Exec& ex, float alpha, const Tensor& x, const Tensor& y) { STRATA_LAUNCH(AxpyKernel, Blocks(x.numel()), kThreads, ex, alpha, F(x), W(y), x.numel()); }

static double Reduce(const Exec& ex, const Tensor& x, bool squares) {
  Accumulator acc(ex);
  STRATA_LAUNCH(SumKernel, Blocks(x.numel()), kThreads, ex, F(x), x.numel(), squares, &acc.get()->sum);
  return acc.Read().sum;
}
double Sum(const Exec& ex, const Tensor& x) { return Reduce(ex, x, false); }
double SumSquares(const Exec& ex, const Tensor& x) { return Reduce(ex, x, true); }

void AddBias(const Exec& ex, const Tensor& x, const Tensor& bias) { STRATA_LAUNCH(AddBiasKernel, Blocks(x.numel()), kThreads, ex, W(x), F(bias), Rows(x), Cols(x)); }
// Adds the column sums of `term` over `rows` into out0 (and out1 for two-output terms); see
// ColumnPartialKernel. Chunks of at least 256 rows, at most 65535 of them (the grid's y).
template <typename Term>
void ColumnSums(const Exec& ex, Term term, int64_t rows, int64_t cols, float* out0, float* out1) {
  if (rows == 0 || cols == 0) return;
  const int64_t chunk_rows = std::max<int64_t>(256, (rows + 65534) / 65535);
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  const int64_t tiles = (cols + kColumnTile - 1) / kColumnTile;
  STRATA_CHECK(tiles <= INT32_MAX) << "ColumnSums: " << cols << " columns";
  const Tensor partial = NewTensor(ex, {Term::kOut * chunks * cols});
  ColumnPartialKernel<<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks)), dim3(kColumnTile, kColumnRows),
                        0, S(ex)>>>(term, W(partial), rows, cols, chunk_rows);
  CheckLaunch();
  STRATA_LAUNCH(ColumnFinishKernel, Blocks(cols), kThreads, ex, F(partial), chunks, cols, out0, out1);
}

void BiasGrad(const Exec& ex, const Tensor& dy, const Tensor& db) {
  ColumnSums(ex, BiasGradTerm{F(dy)}, Rows(dy), Cols(dy), W(db), nullptr);
}
void Relu(const Exec& ex, const Tensor& x, const Tensor& y) { STRATA_LAUNCH(ReluKernel, Blocks(x.numel()), kThreads, ex, F(x), W(y), x.numel()); }
void ReluBackward(const Exec& ex, const Tensor& x, const Tensor& dy, const Tensor& dx) { STRATA_LAUNCH(ReluBackwardKernel, Blocks(x.numel()), kThreads, ex, F(x), F(dy), W(dx), x.numel()); }
void Gelu(const Exec& ex, const Tensor& x, const Tensor& y) { STRATA_LAUNCH(GeluKernel, Blocks(x.numel()), kThreads, ex, F(x), W(y), x.numel()); }
void GeluBackward(const Exec& ex, const Tensor& x, const Tensor& dy, const Tensor& dx) { STRATA_LAUNCH(GeluBackwardKernel, Blocks(x.numel()), kThreads, ex, F(x), F(dy), W(dx), x.numel()); }

void LayerNorm(const Exec& ex, const Tensor& x, const Tensor& gamma, const Tensor& beta,
               float eps, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  STRATA_LAUNCH(LayerNormKernel, Rows(x), RowThreads(Cols(x)), ex, F(x), F(gamma), F(beta), eps, W(y), W(mean), W(rstd), Cols(x));
}
void LayerNormBackward(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                       const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                       const Tensor& dgamma, const Tensor& dbeta) {
  cuda::LayerNormBackwardInput(ex, dy, x, gamma, mean, rstd, dx);
  cuda::LayerNormBackwardWeight(ex, dy, x, mean, rstd, dgamma, dbeta);
}
void LayerNormBackwardInput(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                            const Tensor& mean, const Tensor& rstd, const Tensor& dx) {
  STRATA_LAUNCH(LayerNormBackwardKernel, Rows(x), RowThreads(Cols(x)), ex, F(dy), F(x), F(gamma), F(mean), F(rstd), W(dx), Cols(x));
}
void LayerNormBackwardWeight(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& mean,
                             const Tensor& rstd, const Tensor& dgamma, const Tensor& dbeta) {
  ColumnSums(ex, LayerNormWeightTerm{F(dy), F(x), F(mean), F(rstd)}, Rows(x), Cols(x), W(dgamma), W(dbeta));
}
void Softmax(const Exec& ex, const Tensor& x, const Tensor& y) {
  STRATA_LAUNCH(SoftmaxKernel, Rows(x), RowThreads(Cols(x)), ex, F(x), W(y), Cols(x), int64_t{0}, 1.0f);
}
void SoftmaxBackward(const Exec& ex, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  STRATA_LAUNCH(SoftmaxBackwardKernel, Rows(y), RowThreads(Cols(y)), ex, F(y), F(dy), W(dx), Cols(y), 1.0f);
}

// Scores with cuBLAS (q k^T per head), the causal softmax in place, then att @ v.
void CausalAttention(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& att, const Tensor& out) {
  const int64_t bh = q.size(0) * q.size(1), t = q.size(2), hd = q.size(3);
  const Tensor q3 = *q.Reshape({bh, t, hd}), k3 = *k.Reshape({bh, t, hd}), v3 = *v.Reshape({bh, t, hd});
  const Tensor a3 = *att.Reshape({bh, t, t}), o3 = *out.Reshape({bh, t, hd});
  cuda::Matmul(ex, q3, k3, a3, false, true, 1.0f, 0.0f);
  STRATA_LAUNCH(SoftmaxKernel, bh * t, RowThreads(t), ex, F(a3), W(a3), t, t, 1.0f / sqrtf(static_cast<float>(hd)));
  cuda::Matmul(ex, a3, v3, o3, false, false, 1.0f, 0.0f);
}
void CausalAttentionBackward(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& att, const Tensor& dout, const Tensor& dq,
                             const Tensor& dk, const Tensor& dv) {
  const int64_t bh = q.size(0) * q.size(1), t = q.size(2), hd = q.size(3);
  auto r3 = [&](const Tensor& x, int64_t last) { return *x.Reshape({bh, t, last}); };
  const Tensor a3 = r3(att, t), do3 = r3(dout, hd);
  // B*H*T*T floats: the allocation most likely to exhaust the device (throws OutOfMemory).
  const Tensor datt = NewTensor(ex, {bh, t, t});
  cuda::Matmul(ex, a3, do3, r3(dv, hd), true, false, 1.0f, 0.0f);   // dv = att^T dout
  cuda::Matmul(ex, do3, r3(v, hd), datt, false, true, 1.0f, 0.0f);  // datt = dout v^T
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  // dS (scaled) in place; masked entries have att = 0, so they stay 0.
  STRATA_LAUNCH(SoftmaxBackwardKernel, bh * t, RowThreads(t), ex, F(a3), F(datt), W(datt), t, scale);
  cuda::Matmul(ex, datt, r3(k, hd), r3(dq, hd), false, false, 1.0f, 0.0f);  // dq = dS k
  cuda::Matmul(ex, datt, r3(q, hd), r3(dk, hd), true, false, 1.0f, 0.0f);   // dk = dS^T q
}

void SplitHeads(const Exec& ex, const Tensor& qkv, int64_t batch, int64_t heads, const Tensor& q,
                const Tensor& k, const Tensor& v) {
  STRATA_LAUNCH(SplitHeadsKernel, Blocks(3 * q.numel()), kThreads, ex, F(qkv), W(q), W(k), W(v), batch, heads, q.size(2), q.size(3), false);
}
void MergeHeadsGrad(const Exec& ex, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                    const Tensor& dqkv) {
  STRATA_LAUNCH(SplitHeadsKernel, Blocks(3 * dq.numel()), kThreads, ex, F(dqkv), W(dq), W(dk), W(dv), dq.size(0), dq.size(1), dq.size(2), dq.size(3), true);
}
void MergeHeads(const Exec& ex, const Tensor& y, const Tensor& out) {
  STRATA_LAUNCH(MergeHeadsKernel, Blocks(y.numel()), kThreads, ex, W(y), W(out), y.size(0), y.size(1), y.size(2), y.size(3), false);
}
void SplitHeadsGrad(const Exec& ex, const Tensor& dout, const Tensor& dy) {
  STRATA_LAUNCH(MergeHeadsKernel, Blocks(dy.numel()), kThreads, ex, W(dy), W(dout), dy.size(0), dy.size(1), dy.size(2), dy.size(3), true);
}

double CrossEntropy(const Exec& ex, const Tensor& logits, const Tensor& targets,
                    const Tensor& dlogits, float grad_scale) {
  const int64_t n = Rows(logits), v = Cols(logits);
  Accumulator acc(ex);
  STRATA_LAUNCH(CountValidKernel, Blocks(n), kThreads, ex, targets.data_as<int32_t>(), n, acc.get());
  STRATA_LAUNCH(CrossEntropyKernel, n, RowThreads(v), ex, F(logits), targets.data_as<int32_t>(), W(dlogits), v, grad_scale, acc.get());
  const LossAccum r = acc.Read();
  return r.count ? r.sum / r.count : 0.0;
}
double Mse(const Exec& ex, const Tensor& pred, const Tensor& target, const Tensor& dpred,
           float grad_scale) {
  const int64_t n = pred.numel();
  Accumulator acc(ex);
  STRATA_LAUNCH(MseKernel, Blocks(n), kThreads, ex, F(pred), F(target), W(dpred), n, 2.0f * grad_scale / n, acc.get());
  return acc.Read().sum / n;
}
double BceWithLogits(const Exec& ex, const Tensor& logits, const Tensor& labels,
                     const Tensor& dlogits, float grad_scale) {
  const int64_t n = logits.numel();
  Accumulator acc(ex);
  STRATA_LAUNCH(BceKernel, Blocks(n), kThreads, ex, F(logits), F(labels), W(dlogits), n, grad_scale / n, acc.get());
  return acc.Read().sum / n;
}

void EmbeddingGather(const Exec& ex, const Tensor& table, const Tensor& ids, const Tensor& rows) {
  const int64_t n = ids.numel(), d = table.size(1), vocab = table.size(0);
  if (ids.dtype() == DType::kI64) {
    STRATA_LAUNCH(GatherKernel<int64_t>, Blocks(n * d), kThreads, ex, F(table), ids.data_as<int64_t>(), W(rows), n, d, vocab);
  } else {
    STRATA_LAUNCH(GatherKernel<int32_t>, Blocks(n * d), kThreads, ex, F(table), ids.data_as<int32_t>(), W(rows), n, d, vocab);
  }
}
void EmbeddingScatterAdd(const Exec& ex, const Tensor& drows, const Tensor& ids,
                         const Tensor& dtable) {
  const int64_t n = ids.numel(), d = dtable.size(1), vocab = dtable.size(0);
  if (ids.dtype() == DType::kI64) {
    STRATA_LAUNCH(ScatterAddKernel<int64_t>, Blocks(n * d), kThreads, ex, F(drows), ids.data_as<int64_t>(), W(dtable), n, d, vocab);
  } else {
    STRATA_LAUNCH(ScatterAddKernel<int32_t>, Blocks(n * d), kThreads, ex, F(drows), ids.data_as<int32_t>(), W(dtable), n, d, vocab);
  }
}

void Dropout(const Exec& ex, const Tensor& x, float p, uint64_t seed, const Tensor& y) {
  STRATA_LAUNCH(DropoutKernel, Blocks(x.numel()), kThreads, ex, F(x), W(y), x.numel(), p, seed);
}
void DropoutBackward(const Exec& ex, const Tensor& dy, float p, uint64_t seed, const Tensor& dx) {
  cuda::Dropout(ex, dy, p, seed, dx);
}

void SgdUpdate(const Exec& ex, const Tensor& w, const Tensor& g, const Tensor& v, float lr,
               float momentum, float weight_decay, bool nesterov) {
  STRATA_LAUNCH(SgdKernel, Blocks(w.numel()), kThreads, ex, W(w), F(g), W(v), w.numel(), lr, momentum, weight_decay, nesterov);
}
void AdamWUpdate(const Exec& ex, const Tensor& w, const Tensor& g, const Tensor& m,
                 const Tensor& v, float lr, float beta1, float beta2, float eps,
                 float weight_decay, int64_t t) {
  const float c1 = 1.0f / (1.0f - static_cast<float>(std::pow(beta1, t)));
  const float c2 = 1.0f / (1.0f - static_cast<float>(std::pow(beta2, t)));
  STRATA_LAUNCH(AdamWKernel, Blocks(w.numel()), kThreads, ex, W(w), F(g), W(m), W(v), w.numel(), lr, beta1, beta2, eps, weight_decay, c1, c2);
}

void Cast(const Exec& ex, const Tensor& src, const Tensor& dst) {
  const int64_t n = src.numel();
  const DType s = src.dtype(), d = dst.dtype();
  if (s == d) {
    CUDA_CHECK_FATAL(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice, S(ex)));
  } else if (s == DType::kF32 && d == DType::kBF16) {
    STRATA_LAUNCH((CastKernel<float, __nv_bfloat16>), Blocks(n), kThreads, ex, F(src), static_cast<__nv_bfloat16*>(dst.data()), n);
  } else if (s == DType::kF32 && d == DType::kF16) {
    STRATA_LAUNCH((CastKernel<float, __half>), Blocks(n), kThreads, ex, F(src), static_cast<__half*>(dst.data()), n);
  } else if (s == DType::kBF16 && d == DType::kF32) {
    STRATA_LAUNCH((CastKernel<__nv_bfloat16, float>), Blocks(n), kThreads, ex, static_cast<const __nv_bfloat16*>(src.data()), W(dst), n);
  } else if (s == DType::kF16 && d == DType::kF32) {
    STRATA_LAUNCH((CastKernel<__half, float>), Blocks(n), kThreads, ex, static_cast<const __half*>(src.data()), W(dst), n);
  } else {
    STRATA_CHECK(false) << "cast " << s << " -> " << d << " is not supported";
  }
}

}  // namespace strata::ops::cuda
