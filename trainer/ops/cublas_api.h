// cublas_api.h: CublasLibrary, the few cuBLAS entry points the CUDA ops call, from a libcublas
// opened at run time (dlopen) by the CudaExec that needs one. Linked instead, cuBLAS costs every
// strata process about 0.45 s of start-up and 150 MB of memory (its static constructors and the
// pages of 600 MB of libcublas and libcublasLt), schedulers, servers and CPU trainers included,
// which never call it. Built only with CUDA.
#pragma once

#if STRATA_HAVE_CUDA

#include <cublas_v2.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace strata::ops {

// The entry points, as the headers declare them (cublas_v2.h's names are macros for the _v2
// symbols).
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched = nullptr;
  // tf32 and bf16 matmuls. The C++ header overloads it (a legacy cudaDataType compute type), so
  // the one with cublasComputeType_t is spelled out.
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                            const void*, const void*, cudaDataType, int, long long, const void*,
                                            cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                            long long, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
};

// One dlopen of libcublas, closed with the object (the loader counts references, so several
// CudaExecs share the library's one copy).
class CublasLibrary {
 public:
  // Opens the first of `paths` that loads; a bare file name goes through the loader's search
  // (LD_LIBRARY_PATH, the binary's RUNPATH, ld.so.cache). The error names every path tried with
  // the loader's reason, or the entry point the library lacks.
  static Result<std::unique_ptr<CublasLibrary>> Open(const std::vector<std::string>& paths);
  // What a CUDA build tries: libcublas.so.<the headers' major version>, then the same file in the
  // CUDA toolkit the build was configured against.
  static std::vector<std::string> DefaultPaths();

  ~CublasLibrary();
  CublasLibrary(const CublasLibrary&) = delete;
  CublasLibrary& operator=(const CublasLibrary&) = delete;

  const CublasApi& api() const { return api_; }
  const std::string& path() const { return path_; }

 private:
  CublasLibrary() = default;
  void* handle_ = nullptr;
  CublasApi api_;
  std::string path_;
};

}  // namespace strata::ops

#endif  // STRATA_HAVE_CUDA
