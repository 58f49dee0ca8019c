// cuda_check.h: CUDA_CHECK / NCCL_CHECK convert a CUDA or NCCL error into a Status returned
// from the enclosing function, with the call, file and line as a breadcrumb. The _FATAL forms
// abort instead, for places that cannot return (destructors, kernels' launch wrappers in tests).
// Include only from code built with the CUDA path (STRATA_HAVE_CUDA).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/check.h"
#include "common/status.h"

#define CUDA_CHECK(call)                                                                 \
  do {                                                                                   \
    cudaError_t strata_cuda_err_ = (call);                                               \
    if (strata_cuda_err_ != cudaSuccess) {                                               \
      return ::strata::Status(strata_cuda_err_ == cudaErrorMemoryAllocation              \
                                  ? ::strata::StatusCode::kResourceExhausted             \
                                  : ::strata::StatusCode::kInternal,                     \
                              std::string(#call) + " at " __FILE__ ":" +                 \
                                  std::to_string(__LINE__) + ": " +                      \
                                  cudaGetErrorString(strata_cuda_err_));                 \
    }                                                                                    \
  } while (0)

#define CUDA_CHECK_FATAL(call)                                                       \
  do {                                                                               \
    cudaError_t strata_cuda_err_ = (call);                                           \
    STRATA_CHECK(strata_cuda_err_ == cudaSuccess) << cudaGetErrorString(strata_cuda_err_); \
  } while (0)

#ifdef STRATA_HAVE_NCCL
#include <nccl.h>
#define NCCL_CHECK(call)                                                             \
  do {                                                                               \
    ncclResult_t strata_nccl_res_ = (call);                                          \
    if (strata_nccl_res_ != ncclSuccess) {                                           \
      return ::strata::Status::Internal(std::string(#call) + " at " __FILE__ ":" +   \
                                        std::to_string(__LINE__) + ": " +            \
                                        ncclGetErrorString(strata_nccl_res_));       \
    }                                                                                \
  } while (0)
#endif
