// buffer.h: Buffer, a read-only span of bytes with a keep-alive owner. This is how tensor bytes
// travel through the transport without copies: a ZeroMQ frame received keeps the zmq message
// alive as the owner; a tensor sent keeps its storage alive until ZeroMQ has written it.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

class Buffer {
 public:
  Buffer() = default;
  // Wraps `data` without copying; `owner` (may be null for static data) keeps it alive.
  Buffer(const void* data, size_t size, std::shared_ptr<const void> owner)
      : data_(data), size_(size), owner_(std::move(owner)) {}

  // Copies `size` bytes into a new heap buffer.
  static Buffer Copy(const void* data, size_t size) {
    auto bytes = std::make_shared<std::vector<std::byte>>(size);
    if (size) std::memcpy(bytes->data(), data, size);
    const void* p = bytes->data();  // before the move: argument order is unspecified
    return Buffer(p, size, std::move(bytes));
  }
  static Buffer Copy(std::string_view s) { return Copy(s.data(), s.size()); }
  // Takes ownership of a vector's storage (no copy).
  template <typename T>
  static Buffer Take(std::vector<T> v) {
    auto owned = std::make_shared<std::vector<T>>(std::move(v));
    const void* p = owned->data();
    const size_t n = owned->size() * sizeof(T);
    return Buffer(p, n, std::move(owned));
  }

  const std::byte* data() const { return static_cast<const std::byte*>(data_); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const std::shared_ptr<const void>& owner() const { return owner_; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }

 private:
  const void* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<const void> owner_;
};

// What a transport moves: frame 0 is the envelope, the rest are payloads.
using Frames = std::vector<Buffer>;

}  // namespace strata
