// cuda_exec.cc: CudaExec.
#include "trainer/ops/cuda_exec.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "common/cuda_check.h"

namespace strata::ops {

CudaExec::CudaExec(int device)
    : device_(device), allocator_(std::make_unique<CudaCachingAllocator>(device)) {}

Result<std::unique_ptr<CudaExec>> CudaExec::Create(int device) {
  auto ex = std::unique_ptr<CudaExec>(new CudaExec(device));
  CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  ex->stream_ = stream;
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return Status::Internal("cublasCreate failed");
  ex->cublas_ = handle;
  if (cublasSetStream(handle, stream) != CUBLAS_STATUS_SUCCESS) {
    return Status::Internal("cublasSetStream failed");
  }
  return ex;
}

CudaExec::~CudaExec() {
  if (stream_) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (cublas_) cublasDestroy(static_cast<cublasHandle_t>(cublas_));
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

Status CudaExec::Synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  return Status::OK();
}

}  // namespace strata::ops
