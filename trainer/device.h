// device.h: ComputeDevice, where a trainer computes: the CPU, or a CUDA device with its stream, cuBLAS
// handle and caching allocator (ops::CudaExec), chosen from train.device.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "trainer/ops/exec.h"

namespace strata {

class ComputeDevice {
 public:
  // `spec`: "cpu", "cuda" or "cuda:N". A cluster trainer given plain "cuda" takes device
  // `rank % devices` (a host's trainers have consecutive ranks; NCCL wants one rank per device).
  // `memory_limit_mb` > 0 holds every tensor made through exec() to that many MiB
  // (train.memory_limit_mb: a LimitedAllocator over the device's allocator).
  static Result<std::unique_ptr<ComputeDevice>> Open(const std::string& spec, bool cluster, int rank,
                                                     int64_t memory_limit_mb = 0);
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
