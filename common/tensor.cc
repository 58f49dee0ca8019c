// tensor.cc: Storage, Tensor construction, views, copies and printing.
#include "common/tensor.h"

#include <cstring>
#include <limits>
#include <ostream>
#include <sstream>
#include <utility>

#if STRATA_HAVE_CUDA
#include "common/cuda_allocator.h"
#include "common/cuda_check.h"
#endif

namespace strata {

std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Result<int64_t> ShapeNumel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) {
      return Status::InvalidArgument("bad shape " + ShapeToString(shape));
    }
  }
  return n;
}

std::vector<int64_t> ContiguousStrides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

namespace {

// The byte size of `numel` elements of `dtype`, or InvalidArgument if it overflows.
Result<size_t> ByteSize(const Shape& shape, DType dtype) {
  STRATA_ASSIGN_OR_RETURN(int64_t numel, ShapeNumel(shape));
  size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(numel), DTypeSize(dtype), &bytes)) {
    return Status::InvalidArgument("shape " + ShapeToString(shape) + " of " +
                                   std::string(DTypeName(dtype)) + " overflows size_t bytes");
  }
  return bytes;
}

// Calls fn(a_offset, b_offset) for every index of `shape` in row-major order, with the
// element's offset under strides `a` and under strides `b`; stops early if fn returns false.
// An odometer over the index, so the cost per element is O(1) amortised.
template <typename Fn>
void ForEachElement(const Shape& shape, const std::vector<int64_t>& a,
                    const std::vector<int64_t>& b, Fn&& fn) {
  for (int64_t d : shape) {
    if (d == 0) return;
  }
  const int nd = static_cast<int>(shape.size());
  std::vector<int64_t> index(nd, 0);
  int64_t a_offset = 0;
  int64_t b_offset = 0;
  while (true) {
    if (!fn(a_offset, b_offset)) return;
    int d = nd - 1;
    for (; d >= 0; --d) {
      if (++index[d] < shape[d]) {
        a_offset += a[d];
        b_offset += b[d];
        break;
      }
      a_offset -= (shape[d] - 1) * a[d];
      b_offset -= (shape[d] - 1) * b[d];
      index[d] = 0;
    }
    if (d < 0) return;  // the odometer wrapped: every element was visited
  }
}

// Appends the element at `p` as text.
void AppendValue(std::ostringstream& os, const char* p, DType dtype) {
  switch (dtype) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, p, sizeof v);
      os << v;
      return;
    }
    case DType::kF16:
    case DType::kBF16: {
      uint16_t v;
      std::memcpy(&v, p, sizeof v);
      os << (dtype == DType::kF16 ? HalfToFloat(v) : BF16ToFloat(v));
      return;
    }
    case DType::kI32: {
      int32_t v;
      std::memcpy(&v, p, sizeof v);
      os << v;
      return;
    }
    case DType::kI64: {
      int64_t v;
      std::memcpy(&v, p, sizeof v);
      os << v;
      return;
    }
    case DType::kU8:
      os << static_cast<int>(static_cast<unsigned char>(*p));
      return;
  }
}

}  // namespace

// --- Storage

Storage::Storage(Token, void* data, size_t nbytes, Device device, Allocator* allocator,
                 std::shared_ptr<void> owner)
    : data_(data),
      nbytes_(nbytes),
      device_(device),
      allocator_(allocator),
      owner_(std::move(owner)) {}

Storage::~Storage() {
  if (allocator_ != nullptr) allocator_->Free(data_);
}

Result<std::shared_ptr<Storage>> Storage::Allocate(size_t nbytes, Allocator& allocator) {
  STRATA_ASSIGN_OR_RETURN(void* data, allocator.Allocate(nbytes));
  return std::make_shared<Storage>(Token{}, data, nbytes, allocator.device(), &allocator, nullptr);
}

std::shared_ptr<Storage> Storage::Wrap(void* data, size_t nbytes, Device device,
                                       std::shared_ptr<void> owner) {
  return std::make_shared<Storage>(Token{}, data, nbytes, device, nullptr, std::move(owner));
}

// --- Construction

Tensor::Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape shape,
               std::vector<int64_t> strides, size_t offset)
    : storage_(std::move(storage)),
      dtype_(dtype),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      offset_(offset) {}

Result<Tensor> Tensor::Empty(Shape shape, DType dtype, Allocator& allocator) {
  STRATA_ASSIGN_OR_RETURN(size_t bytes, ByteSize(shape, dtype));
  STRATA_ASSIGN_OR_RETURN(auto storage, Storage::Allocate(bytes, allocator));
  std::vector<int64_t> strides = ContiguousStrides(shape);
  return Tensor(std::move(storage), dtype, std::move(shape), std::move(strides), 0);
}

Result<Tensor> Tensor::Empty(Shape shape, DType dtype) {
  return Empty(std::move(shape), dtype, HostAllocator());
}

Result<Tensor> Tensor::Zeros(Shape shape, DType dtype, Allocator& allocator) {
  STRATA_ASSIGN_OR_RETURN(Tensor t, Empty(std::move(shape), dtype, allocator));
  if (t.nbytes() == 0) return t;
  if (t.is_cpu()) {
    std::memset(t.data(), 0, t.nbytes());
    return t;
  }
#if STRATA_HAVE_CUDA
  CudaDeviceGuard guard;
  STRATA_RETURN_IF_ERROR(guard.Enter(t.device().index));
  CUDA_CHECK(cudaMemset(t.data(), 0, t.nbytes()));
  return t;
#else
  return Status::Unavailable("Zeros on " + t.device().ToString() + ": built without CUDA");
#endif
}

Result<Tensor> Tensor::Zeros(Shape shape, DType dtype) {
  return Zeros(std::move(shape), dtype, HostAllocator());
}

Tensor Tensor::FromBlob(void* data, Shape shape, DType dtype, Device device,
                        std::shared_ptr<void> owner) {
  Result<size_t> bytes = ByteSize(shape, dtype);
  STRATA_CHECK(bytes.ok()) << bytes.status().ToString();
  STRATA_CHECK(data != nullptr || *bytes == 0) << "FromBlob of null data";
  auto storage = Storage::Wrap(data, *bytes, device, std::move(owner));
  std::vector<int64_t> strides = ContiguousStrides(shape);
  return Tensor(std::move(storage), dtype, std::move(shape), std::move(strides), 0);
}

Result<Tensor> Tensor::FromBuffer(void* data, size_t nbytes, Shape shape, DType dtype,
                                  Device device, std::shared_ptr<void> owner) {
  STRATA_ASSIGN_OR_RETURN(size_t bytes, ByteSize(shape, dtype));
  if (bytes != nbytes) {
    return Status::InvalidArgument("a " + std::string(DTypeName(dtype)) + ShapeToString(shape) +
                                   " tensor needs " + std::to_string(bytes) + " bytes, got " +
                                   std::to_string(nbytes));
  }
  if (data == nullptr && nbytes != 0) return Status::InvalidArgument("null tensor buffer");
  return FromBlob(data, std::move(shape), dtype, device, std::move(owner));
}

// --- Accessors

void Tensor::CheckDim(int d) const {
  STRATA_CHECK(defined()) << "undefined tensor";
  STRATA_CHECK(d >= 0 && d < dim()) << "dimension " << d << " of a " << dim() << "-d tensor";
}

int64_t Tensor::size(int d) const {
  CheckDim(d);
  return shape_[d];
}

int64_t Tensor::stride(int d) const {
  CheckDim(d);
  return strides_[d];
}

int64_t Tensor::numel() const {
  if (!defined()) return 0;
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;  // validated when the tensor was made
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int d = dim() - 1; d >= 0; --d) {
    if (shape_[d] == 0) return true;
    if (shape_[d] != 1 && strides_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

void* Tensor::data() const {
  STRATA_CHECK(defined()) << "data() of an undefined tensor";
  auto* base = static_cast<char*>(storage_->data());
  return base == nullptr ? nullptr : base + offset_;
}

// --- Views

Tensor Tensor::Narrow(int d, int64_t start, int64_t length) const {
  CheckDim(d);
  STRATA_CHECK(start >= 0 && length >= 0 && start + length <= shape_[d])
      << "Narrow(" << d << ", " << start << ", " << length << ") of " << ShapeToString(shape_);
  Shape shape = shape_;
  shape[d] = length;
  const size_t offset = offset_ + static_cast<size_t>(start * strides_[d]) * element_size();
  return Tensor(storage_, dtype_, std::move(shape), strides_, offset);
}

Tensor Tensor::Select(int d, int64_t index) const {
  CheckDim(d);
  STRATA_CHECK(index >= 0 && index < shape_[d])
      << "Select(" << d << ", " << index << ") of " << ShapeToString(shape_);
  Shape shape = shape_;
  std::vector<int64_t> strides = strides_;
  const size_t offset = offset_ + static_cast<size_t>(index * strides_[d]) * element_size();
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return Tensor(storage_, dtype_, std::move(shape), std::move(strides), offset);
}

Tensor Tensor::Transpose(int d0, int d1) const {
  CheckDim(d0);
  CheckDim(d1);
  Tensor t = *this;
  std::swap(t.shape_[d0], t.shape_[d1]);
  std::swap(t.strides_[d0], t.strides_[d1]);
  return t;
}

Result<Tensor> Tensor::Reshape(Shape shape) const {
  STRATA_CHECK(defined()) << "Reshape of an undefined tensor";
  if (!is_contiguous()) {
    return Status::FailedPrecondition("Reshape of a non-contiguous " + ShapeToString(shape_) +
                                      " tensor; call Contiguous() first");
  }
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1 && inferred < 0) {
      inferred = static_cast<int>(i);
    } else if (shape[i] < 0 || __builtin_mul_overflow(known, shape[i], &known)) {
      return Status::InvalidArgument("bad reshape target " + ShapeToString(shape));
    }
  }
  const int64_t n = numel();
  if (inferred >= 0) {
    if (known == 0 || n % known != 0) {
      return Status::InvalidArgument("cannot reshape " + ShapeToString(shape_) + " into " +
                                     ShapeToString(shape));
    }
    shape[inferred] = n / known;
  } else if (known != n) {
    return Status::InvalidArgument("cannot reshape " + ShapeToString(shape_) + " (" +
                                   std::to_string(n) + " elements) into " + ShapeToString(shape));
  }
  std::vector<int64_t> strides = ContiguousStrides(shape);
  return Tensor(storage_, dtype_, std::move(shape), std::move(strides), offset_);
}

// --- Copies

Result<Tensor> Tensor::Contiguous() const {
  STRATA_CHECK(defined()) << "Contiguous of an undefined tensor";
  if (is_contiguous()) return *this;
  if (!is_cpu()) {
    return Status::Unimplemented("Contiguous of a strided " + device().ToString() + " tensor");
  }
  Allocator* allocator = storage_->allocator();
  if (allocator == nullptr || !allocator->device().is_cpu()) allocator = &HostAllocator();
  STRATA_ASSIGN_OR_RETURN(Tensor out, Empty(shape_, dtype_, *allocator));
  STRATA_RETURN_IF_ERROR(out.CopyFrom(*this));
  return out;
}

Status Tensor::CopyFrom(const Tensor& src) {
  STRATA_CHECK(defined() && src.defined()) << "CopyFrom with an undefined tensor";
  if (shape_ != src.shape_ || dtype_ != src.dtype_) {
    return Status::InvalidArgument("CopyFrom a " + std::string(DTypeName(src.dtype_)) +
                                   ShapeToString(src.shape_) + " tensor into a " +
                                   std::string(DTypeName(dtype_)) + ShapeToString(shape_) + " one");
  }
  const size_t bytes = nbytes();
  if (bytes == 0 || (data() == src.data() && strides_ == src.strides_)) return Status::OK();
  const bool contiguous = is_contiguous() && src.is_contiguous();

  if (is_cpu() && src.is_cpu()) {
    if (contiguous) {
      std::memmove(data(), src.data(), bytes);
      return Status::OK();
    }
    auto* dst_bytes = static_cast<char*>(data());
    const auto* src_bytes = static_cast<const char*>(src.data());
    const size_t esize = element_size();
    ForEachElement(shape_, strides_, src.strides_, [&](int64_t d, int64_t s) {
      std::memcpy(dst_bytes + d * static_cast<int64_t>(esize),
                  src_bytes + s * static_cast<int64_t>(esize), esize);
      return true;
    });
    return Status::OK();
  }

#if STRATA_HAVE_CUDA
  if (!contiguous) {
    return Status::Unimplemented("strided copy from " + src.device().ToString() + " to " +
                                 device().ToString());
  }
  // With unified addressing the runtime tells host from device pointers (and which device).
  CUDA_CHECK(cudaMemcpy(data(), src.data(), bytes, cudaMemcpyDefault));
  return Status::OK();
#else
  return Status::Unavailable("copy from " + src.device().ToString() + " to " + device().ToString() +
                             ": built without CUDA");
#endif
}

// --- Printing

std::string Tensor::ToString() const {
  if (!defined()) return "Tensor(undefined)";
  constexpr int64_t kMaxValues = 8;
  std::ostringstream os;
  os << "Tensor(shape=" << ShapeToString(shape_) << ", dtype=" << dtype_ << ", device=" << device();
  if (!is_contiguous()) os << ", strides=" << ShapeToString(strides_);
  if (is_cpu() && nbytes() > 0) {
    os << ", values=[";
    const auto* base = static_cast<const char*>(data());
    const auto esize = static_cast<int64_t>(element_size());
    int64_t printed = 0;
    ForEachElement(shape_, strides_, strides_, [&](int64_t offset, int64_t) {
      if (printed == kMaxValues) {
        os << ", ...";
        return false;
      }
      if (printed++ > 0) os << ", ";
      AppendValue(os, base + offset * esize, dtype_);
      return true;
    });
    os << "]";
  }
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& tensor) { return os << tensor.ToString(); }

}  // namespace strata
