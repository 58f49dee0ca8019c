// device.h: ComputeDevice, where a trainer computes: the CPU, or a CUDA device with its stream, cuBLAS
// handle and caching allocator (ops::CudaExec), chosen from train.device.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "trainer/ops/exec.h"

namespace strata {

// The CUDA device index a trainer takes for train.device `spec` ("cuda" or "cuda:N") when
// `visible` devices are visible to it (CUDA_VISIBLE_DEVICES already applied):
//   "cuda:N"                       N, always (an explicit index wins; N >= visible is an error)
//   "cuda", local_task >= 0        local_task % visible: under Slurm (SLURM_LOCALID) or torchrun
//                                  (LOCAL_RANK) the tasks of one machine spread over its GPUs;
//                                  with --gpus-per-task 1 each task sees one GPU and takes it
//   "cuda", in a cluster           rank % visible (strata-launch: a host's trainers have
//                                  consecutive ranks)
//   "cuda", alone                  0
// A pure function (no CUDA call), so it is tested without a GPU. FailedPrecondition when no
// device is visible; InvalidArgument for a malformed spec.
Result<int> ChooseCudaDevice(const std::string& spec, int visible, bool cluster, int rank, int local_task);

class ComputeDevice {
 public:
  // `spec`: "cpu", "cuda" or "cuda:N"; the device is ChooseCudaDevice's (`local_task`: see
  // TrainOptions::local_task). `memory_limit_mb` > 0 holds every tensor made through exec() to
  // that many MiB (train.memory_limit_mb: a LimitedAllocator over the device's allocator).
  // `matmul` is how its matmuls multiply and `saved` the type layers keep saved activations in
  // (TrainOptions::Matmul and Saved: train.precision, train.matmul_precision).
  static Result<std::unique_ptr<ComputeDevice>> Open(const std::string& spec, bool cluster, int rank,
                                                     int64_t memory_limit_mb = 0, int local_task = -1,
                                                     ops::MatmulPrecision matmul = ops::MatmulPrecision::kFp32,
                                                     DType saved = DType::kF32);
  ComputeDevice(const ComputeDevice&) = delete;
  ComputeDevice& operator=(const ComputeDevice&) = delete;

  const ops::Exec& exec() const { return exec_; }

 private:
  ComputeDevice() = default;
  std::shared_ptr<void> owner_;  // the ops::CudaExec behind exec_ (CUDA builds)
  std::unique_ptr<Allocator> limited_;  // over exec_'s allocator, with a memory limit
  ops::Exec exec_;
};

// Waits until the work queued on `ex`'s stream is done (nothing to wait for on the CPU).
void SynchronizeDevice(const ops::Exec& ex);

}  // namespace strata
