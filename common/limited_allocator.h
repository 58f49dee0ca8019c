// limited_allocator.h: LimitedAllocator, an Allocator that hands out at most a fixed number of
// bytes through another one: how a trainer is held to train.memory_limit_mb (a GPU's memory,
// or a share of a host, made a hard limit that a test can set).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/allocator.h"

namespace strata {

// Allocate fails with ResourceExhausted, naming `what` (the setting that set the limit), when
// the bytes in use would pass `limit_bytes`; nothing is allocated then. Thread-safe. `base`
// must outlive this allocator, and this allocator every block it handed out.
class LimitedAllocator final : public Allocator {
 public:
  LimitedAllocator(Allocator& base, int64_t limit_bytes, std::string what);
  LimitedAllocator(const LimitedAllocator&) = delete;
  LimitedAllocator& operator=(const LimitedAllocator&) = delete;

  Result<void*> Allocate(size_t bytes) override;
  void Free(void* p) override;
  Device device() const override { return base_.device(); }
  // Counts the bytes asked for (not the base's rounding).
  AllocatorStats stats() const override;
  void ResetPeak() override;
  int64_t limit_bytes() const { return limit_; }

 private:
  Allocator& base_;
  const int64_t limit_;
  const std::string what_;
  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> sizes_;
  AllocatorStats stats_;
};

}  // namespace strata
