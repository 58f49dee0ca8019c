// exec.h: Exec, where an op runs (the CPU, or a CUDA device with its stream and cuBLAS handle),
// and the helpers that allocate op outputs beside their inputs.
#pragma once

#include <exception>
#include <string_view>
#include <utility>

#include "common/allocator.h"
#include "common/status.h"
#include "common/tensor.h"

namespace strata::ops {

struct CublasApi;  // cublas_api.h (CUDA builds)

// How matmuls multiply fp32 tensors (train.matmul_precision). kFp32: in fp32. kTf32 and kBf16:
// the inputs are rounded to TF32 (10-bit mantissa) or bf16 (7-bit) and the products accumulate
// in fp32. On CUDA cuBLAS does it on the tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32 / _FAST_16BF;
// PyTorch's set_float32_matmul_precision "high" / "medium"); the CPU rounds copies of the
// operands to nearest (even) and multiplies them with sgemm, whose products of such values are
// exact, so it computes what a bf16 GEMM with fp32 accumulation computes (OpenBLAS's sbgemm,
// say) up to the order of the sums. Tensors stay fp32 either way.
enum class MatmulPrecision : uint8_t { kFp32, kTf32, kBf16 };
const char* MatmulPrecisionName(MatmulPrecision p);  // "fp32", "tf32", "bf16"
// The precision MatmulPrecisionName names; InvalidArgument listing the names otherwise.
Result<MatmulPrecision> ParseMatmulPrecision(std::string_view name);

// A non-owning handle passed to every op. For the CPU it is empty. For CUDA, `stream` is a
// cudaStream_t, `cublas` a cublasHandle_t already bound to that stream and `cublas_api` the
// loaded cuBLAS to call it with; `allocator` hands out memory on that device. Ops on CUDA tensors
// run asynchronously on `stream`. The owner of these handles is CudaExec (cuda_exec.h).
struct Exec {
  Device device = Device::CPU();
  void* stream = nullptr;
  void* cublas = nullptr;
  const CublasApi* cublas_api = nullptr;
  Allocator* allocator = nullptr;  // null: HostAllocator() (CPU only)
  MatmulPrecision matmul = MatmulPrecision::kFp32;
  // The type nn::Context keeps the activations a layer saves for backward in (SaveActivation):
  // kF32, or kBF16 under train.precision bf16 (half the bytes; widened again when read).
  DType saved = DType::kF32;

  static Exec Cpu() { return Exec{}; }
  bool is_cuda() const { return device.is_cuda(); }
  Allocator& alloc() const { return allocator ? *allocator : HostAllocator(); }
};

// Thrown by NewTensor when the device has no room left (the allocator said ResourceExhausted).
// Running out of memory is a matter of configuration (batch size, width, recompute), not a bug,
// so it must not abort; but a Status on every op and layer signature would bury the compute in
// error plumbing for the one failure that can happen in the middle of it. So ops throw this, and
// only this, and the trainer turns it back into a Status at its boundary (CatchOutOfMemory):
// Trainer::Create and Trainer::Run return ResourceExhausted naming the allocation. Nothing is
// half-applied by then: parameters change only in the optimizer step, which allocates nothing.
class OutOfMemory : public std::exception {
 public:
  explicit OutOfMemory(Status status) : status_(std::move(status)) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return status_.message().c_str(); }

 private:
  Status status_;
};

// A new tensor on ex's device; throws OutOfMemory when the device is full. Any other allocation
// failure (an absurd shape) is a bug and aborts.
Tensor NewTensor(const Exec& ex, Shape shape, DType dtype = DType::kF32);
Tensor NewZeros(const Exec& ex, Shape shape, DType dtype = DType::kF32);

}  // namespace strata::ops
