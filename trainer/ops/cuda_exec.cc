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
  STRATA_ASSIGN_OR_RETURN(ex->blas_, CublasLibrary::Open(CublasLibrary::DefaultPaths()));
  const CublasApi& blas = ex->blas_->api();
  cublasHandle_t handle;
  if (const cublasStatus_t s = blas.create(&handle); s != CUBLAS_STATUS_SUCCESS) {
    return Status::Internal("cublasCreate (" + ex->blas_->path() + ") failed: status " + std::to_string(s));
  }
  ex->cublas_ = handle;
  if (const cublasStatus_t s = blas.set_stream(handle, stream); s != CUBLAS_STATUS_SUCCESS) {
    return Status::Internal("cublasSetStream failed: status " + std::to_string(s));
  }
  return ex;
}

CudaExec::~CudaExec() {
  if (stream_) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (cublas_) blas_->api().destroy(static_cast<cublasHandle_t>(cublas_));
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

Status CudaExec::Synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  return Status::OK();
}

}  // namespace strata::ops
