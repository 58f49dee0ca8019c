// cuda_exec.h: CudaExec, the owner of what CUDA ops run with: a stream, cuBLAS (opened at run
// time, cublas_api.h) with a handle bound to the stream, and a caching allocator on the device.
// Built only with CUDA.
#pragma once

#if STRATA_HAVE_CUDA

#include <memory>

#include "common/cuda_allocator.h"
#include "common/status.h"
#include "trainer/ops/cublas_api.h"
#include "trainer/ops/exec.h"

namespace strata::ops {

// The stream is a blocking one (cudaStreamCreate), so Tensor::CopyFrom's cudaMemcpy on the
// legacy default stream is ordered against it without extra events. Use from one thread.
class CudaExec {
 public:
  // Fails naming what could not be had: the device, a stream, or cuBLAS (every path tried).
  static Result<std::unique_ptr<CudaExec>> Create(int device);
  ~CudaExec();
  CudaExec(const CudaExec&) = delete;
  CudaExec& operator=(const CudaExec&) = delete;

  Exec exec() { return Exec{Device::CUDA(device_), stream_, cublas_, &blas_->api(), allocator_.get()}; }
  Status Synchronize();

 private:
  explicit CudaExec(int device);
  int device_;
  std::unique_ptr<CudaCachingAllocator> allocator_;
  std::unique_ptr<CublasLibrary> blas_;
  void* stream_ = nullptr;
  void* cublas_ = nullptr;
};

}  // namespace strata::ops

#endif  // STRATA_HAVE_CUDA
