// exec.h: Exec, where an op runs (the CPU, or a CUDA device with its stream and cuBLAS handle),
// and the helpers that allocate op outputs beside their inputs.
#pragma once

#include "common/allocator.h"
#include "common/tensor.h"

namespace strata::ops {

// A non-owning handle passed to every op. For the CPU it is empty. For CUDA, `stream` is a
// cudaStream_t and `cublas` a cublasHandle_t already bound to that stream; `allocator` hands out
// memory on that device. Ops on CUDA tensors run asynchronously on `stream`. The owner of these
// handles is CudaExec (cuda_exec.h) or the caller.
struct Exec {
  Device device = Device::CPU();
  void* stream = nullptr;
  void* cublas = nullptr;
  Allocator* allocator = nullptr;  // null: HostAllocator() (CPU only)

  static Exec Cpu() { return Exec{}; }
  bool is_cuda() const { return device.is_cuda(); }
  Allocator& alloc() const { return allocator ? *allocator : HostAllocator(); }
};

// A new tensor on ex's device. Allocation failure aborts: the trainer cannot continue without
// its activations, and a Status here would touch every op signature.
Tensor NewTensor(const Exec& ex, Shape shape, DType dtype = DType::kF32);
Tensor NewZeros(const Exec& ex, Shape shape, DType dtype = DType::kF32);

}  // namespace strata::ops
