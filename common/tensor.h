// tensor.h: Tensor (dtype, shape, strides, device, over shared Storage), its views (Narrow,
// Select, Transpose, Reshape) and copies. The container the ops of a later layer work on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "common/allocator.h"
#include "common/check.h"
#include "common/dtype.h"
#include "common/status.h"

namespace strata {

using Shape = std::vector<int64_t>;

std::string ShapeToString(const Shape& shape);  // "[2, 3]"
// The number of elements; InvalidArgument if a dimension is negative or the product overflows.
// Use it to validate shapes that come from outside (the wire, a file).
Result<int64_t> ShapeNumel(const Shape& shape);
// Row-major strides (in elements) of a contiguous tensor of `shape`.
std::vector<int64_t> ContiguousStrides(const Shape& shape);

// A block of bytes on one device that tensors view. Either allocated from an Allocator (and
// freed through it when the last tensor lets go), or someone else's memory kept alive by an
// `owner` handle (a received network frame, a memory-mapped file), which makes zero-copy
// tensors possible. Immutable after construction, so sharing it across threads is safe;
// the bytes themselves are not synchronised.
class Storage {
  struct Token {  // lets make_shared call the constructor while keeping it private to us
    explicit Token() = default;
  };

 public:
  // `allocator` must outlive the storage.
  static Result<std::shared_ptr<Storage>> Allocate(size_t nbytes, Allocator& allocator);
  // Wraps `nbytes` at `data`, holding `owner` (may be null) until the storage is destroyed.
  static std::shared_ptr<Storage> Wrap(void* data, size_t nbytes, Device device,
                                       std::shared_ptr<void> owner);

  Storage(Token, void* data, size_t nbytes, Device device, Allocator* allocator,
          std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  Allocator* allocator() const { return allocator_; }  // null for wrapped memory

 private:
  void* const data_;
  const size_t nbytes_;
  const Device device_;
  Allocator* const allocator_;         // frees data_ if set; not owned
  const std::shared_ptr<void> owner_;  // keeps wrapped memory alive
};

// A strided view of a Storage: element (i0, i1, ...) lives at
// storage.data() + storage_offset() + (i0*strides[0] + i1*strides[1] + ...) * element_size().
// Copying a Tensor copies the handle, not the elements (both see the same bytes), like a
// shared_ptr. A default-constructed Tensor is undefined (no storage).
//
// Thread safety: a Tensor handle is a value; concurrent reads of the elements are fine,
// concurrent writes (or a write beside reads) need outside synchronisation.
class Tensor {
 public:
  Tensor() = default;

  // Uninitialised elements from `allocator` (which must outlive the tensor).
  static Result<Tensor> Empty(Shape shape, DType dtype, Allocator& allocator);
  static Result<Tensor> Empty(Shape shape, DType dtype);  // from HostAllocator()
  static Result<Tensor> Zeros(Shape shape, DType dtype, Allocator& allocator);
  static Result<Tensor> Zeros(Shape shape, DType dtype);
  // A contiguous tensor over memory the caller provides; `owner` is held until the last tensor
  // sharing it is gone. The shape must be valid (see ShapeNumel) and the memory large enough:
  // trusted input only. FromBuffer is the checked form for bytes from outside.
  static Tensor FromBlob(void* data, Shape shape, DType dtype, Device device,
                         std::shared_ptr<void> owner);
  // FromBlob on the host over `data`, shaped like `like` (the caller keeps the memory): what
  // CopyFrom copies a device tensor into or out of.
  static Tensor HostView(void* data, const Tensor& like, DType dtype = DType::kF32) {
    return FromBlob(data, like.shape(), dtype, Device::CPU(), nullptr);
  }
  // FromBlob for untrusted input: InvalidArgument unless the shape is valid and its bytes are
  // exactly `nbytes`.
  static Result<Tensor> FromBuffer(void* data, size_t nbytes, Shape shape, DType dtype,
                                   Device device, std::shared_ptr<void> owner);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::CPU(); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  const Shape& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }  // in elements
  int dim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int d) const;
  int64_t stride(int d) const;
  int64_t numel() const;  // 0 for an undefined tensor
  size_t element_size() const { return DTypeSize(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  size_t storage_offset() const { return offset_; }  // in bytes
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // Row-major with no gaps (dimensions of size 1 may have any stride).
  bool is_contiguous() const;

  // The first element; null for an empty tensor. Mutable even from a const Tensor: a Tensor is
  // a handle, and the constness of a handle does not protect the bytes it shares.
  void* data() const;
  // data() typed; aborts unless the dtype holds T (DTypeHolds: f16/bf16 as uint16_t).
  template <typename T>
  T* data_as() const {
    STRATA_CHECK(DTypeHolds<T>(dtype_)) << "data_as on a " << dtype_ << " tensor";
    return static_cast<T*>(data());
  }

  // Views: they share the storage, so writes through one are seen by all. Out-of-range
  // arguments are bugs and abort.
  Tensor Narrow(int d, int64_t start, int64_t length) const;  // [start, start + length) of d
  Tensor Select(int d, int64_t index) const;                  // drops dimension d
  Tensor Transpose(int d0, int d1) const;
  // The same elements under another shape; one dimension may be -1 (inferred). Only for
  // contiguous tensors (FailedPrecondition otherwise: call Contiguous() first); InvalidArgument
  // if the element counts differ.
  Result<Tensor> Reshape(Shape shape) const;

  // This tensor if already contiguous, else a contiguous copy from the same allocator (the host
  // allocator for wrapped memory). Strided CUDA tensors are Unimplemented for now.
  Result<Tensor> Contiguous() const;
  // Copies `src`'s elements into this tensor's. Same shape and dtype, else InvalidArgument.
  // CPU<->CPU for any strides; with CUDA, contiguous copies between any devices (cudaMemcpy:
  // ordered on the legacy default stream, and blocking the host when one side is host memory).
  // `src` and this must not overlap unless they are the same view.
  Status CopyFrom(const Tensor& src);

  // "Tensor(shape=[2, 3], dtype=f32, device=cpu, values=[0, 1, 2, 3, 4, 5])". Values (the first
  // few, row-major) are printed for CPU tensors only.
  std::string ToString() const;

 private:
  Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape shape, std::vector<int64_t> strides,
         size_t offset);
  void CheckDim(int d) const;

  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::vector<int64_t> strides_;
  size_t offset_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Tensor& tensor);

}  // namespace strata
