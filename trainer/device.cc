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

Result<int> ChooseCudaDevice(const std::string& spec, int visible, bool cluster, int rank, int local_task) {
  STRATA_ASSIGN_OR_RETURN(Device where, ParseDevice(spec));
  if (!where.is_cuda()) return Status::InvalidArgument("train.device " + spec + " is not a CUDA device");
  if (visible <= 0) {
    return Status::FailedPrecondition("train.device is " + spec +
                                      " but no CUDA device is visible (check CUDA_VISIBLE_DEVICES and the "
                                      "job's GPU request, e.g. srun --gpus-per-task 1)");
  }
  if (spec != "cuda") {  // an explicit index
    if (where.index >= visible) {
      return Status::InvalidArgument("train.device is " + spec + " but only " + std::to_string(visible) +
                                     " CUDA device(s) are visible");
    }
    return where.index;
  }
  if (local_task >= 0) return local_task % visible;
  if (cluster && rank >= 0) return rank % visible;
  return 0;
}

Result<std::unique_ptr<ComputeDevice>> ComputeDevice::Open(const std::string& spec, bool cluster, int rank,
                                                           int64_t memory_limit_mb, int local_task,
                                                           ops::MatmulPrecision matmul, DType saved) {
  STRATA_ASSIGN_OR_RETURN(Device where, ParseDevice(spec));
  if (saved != DType::kF32 && saved != DType::kBF16) {
    return Status::InvalidArgument("saved activations in " + std::string(DTypeName(saved)) + ": f32 or bf16 only");
  }
  auto d = std::unique_ptr<ComputeDevice>(new ComputeDevice());
  if (!where.is_cuda()) {
    d->exec_.matmul = matmul;
    d->exec_.saved = saved;
    Limit(&d->limited_, &d->exec_, memory_limit_mb);
    return d;
  }
#if STRATA_HAVE_CUDA
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess) visible = 0;
  STRATA_ASSIGN_OR_RETURN(where.index, ChooseCudaDevice(spec, visible, cluster, rank, local_task));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ops::CudaExec> cuda, ops::CudaExec::Create(where.index));
  d->exec_ = cuda->exec();
  d->exec_.matmul = matmul;
  d->exec_.saved = saved;
  d->owner_ = std::shared_ptr<ops::CudaExec>(std::move(cuda));
  Limit(&d->limited_, &d->exec_, memory_limit_mb);
  return d;
#else
  (void)cluster;
  (void)rank;
  (void)local_task;
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
