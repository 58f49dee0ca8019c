// cublas_api.cc: CublasLibrary.
#include "trainer/ops/cublas_api.h"

#include <dlfcn.h>

namespace strata::ops {

namespace {

// dlsym into `*fn`, typed as the header declares it.
template <typename Fn>
Status Resolve(void* handle, const std::string& path, const char* symbol, Fn* fn) {
  dlerror();
  void* p = dlsym(handle, symbol);
  if (p == nullptr) return Status::NotFound(path + " has no " + symbol + " (is it cuBLAS " + std::to_string(CUBLAS_VER_MAJOR) + "?)");
  *fn = reinterpret_cast<Fn>(p);
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<CublasLibrary>> CublasLibrary::Open(const std::vector<std::string>& paths) {
  std::string tried;
  for (const std::string& path : paths) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      tried += "\n  " + path + ": " + (why ? why : "not loaded");
      continue;
    }
    auto lib = std::unique_ptr<CublasLibrary>(new CublasLibrary);
    lib->handle_ = handle;
    lib->path_ = path;
    CublasApi& a = lib->api_;
    STRATA_RETURN_IF_ERROR(Resolve(handle, path, "cublasCreate_v2", &a.create));
    STRATA_RETURN_IF_ERROR(Resolve(handle, path, "cublasDestroy_v2", &a.destroy));
    STRATA_RETURN_IF_ERROR(Resolve(handle, path, "cublasSetStream_v2", &a.set_stream));
    STRATA_RETURN_IF_ERROR(Resolve(handle, path, "cublasSgemmStridedBatched", &a.sgemm_strided_batched));
    STRATA_RETURN_IF_ERROR(Resolve(handle, path, "cublasGemmStridedBatchedEx", &a.gemm_strided_batched_ex));
    return lib;
  }
  return Status::NotFound("cuBLAS could not be loaded; tried:" + tried);
}

std::vector<std::string> CublasLibrary::DefaultPaths() {
  const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  return {name, std::string(STRATA_CUDA_LIBRARY_DIR) + "/" + name};
}

CublasLibrary::~CublasLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

}  // namespace strata::ops
