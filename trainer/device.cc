// device.cc: ComputeDevice::Open.
#include "trainer/device.h"

#include "common/limited_allocator.h"
#include "common/tensor.h"
#if STRATA_HAVE_CUDA
#include <cuda_runtime.h>

#include "trainer/ops/cuda_exec.h"
#endif

namespace strata {

namespace {
// Puts a memory limit in front of the device's allocator.
void Limit(std::unique_ptr<Allocator>* holder, ops::Exec* exec, int64_t limit_mb) {
  if (limit_mb <= 0) return;
  *holder = std::make_unique<LimitedAllocator>(exec->alloc(), limit_mb << 20, "train.memory_limit_mb");
  exec->allocator = holder->get();
}
}  // namespace

Result<std::unique_ptr<ComputeDevice>> ComputeDevice::Open(const std::string& spec, bool cluster, int rank,
                                                           int64_t memory_limit_mb) {
  STRATA_ASSIGN_OR_RETURN(Device where, ParseDevice(spec));
  auto d = std::unique_ptr<ComputeDevice>(new ComputeDevice());
  if (!where.is_cuda()) {
    Limit(&d->limited_, &d->exec_, memory_limit_mb);
    return d;
  }
#if STRATA_HAVE_CUDA
  if (cluster && spec == "cuda") {
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) where.index = rank % count;
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ops::CudaExec> cuda, ops::CudaExec::Create(where.index));
  d->exec_ = cuda->exec();
  d->owner_ = std::shared_ptr<ops::CudaExec>(std::move(cuda));
  Limit(&d->limited_, &d->exec_, memory_limit_mb);
  return d;
#else
  (void)cluster;
  (void)rank;
  return Status::Unimplemented("train.device is " + spec + " but this build has no CUDA");
#endif
}

void SynchronizeDevice(const ops::Exec& ex) {
#if STRATA_HAVE_CUDA
  if (ex.is_cuda()) cudaStreamSynchronize(static_cast<cudaStream_t>(ex.stream));
#else
  (void)ex;
#endif
}

}  // namespace strata
