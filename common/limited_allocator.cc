// limited_allocator.cc: LimitedAllocator.
#include "common/limited_allocator.h"

#include <algorithm>

#include "common/check.h"

namespace strata {
namespace {
std::string Mib(int64_t bytes) { return std::to_string((bytes + (1 << 19)) >> 20) + " MiB"; }
}  // namespace

LimitedAllocator::LimitedAllocator(Allocator& base, int64_t limit_bytes, std::string what)
    : base_(base), limit_(limit_bytes), what_(std::move(what)) {}

Result<void*> LimitedAllocator::Allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  const auto n = static_cast<int64_t>(bytes);
  if (stats_.bytes_in_use + n > limit_) {
    return Status::ResourceExhausted(what_ + " (" + Mib(limit_) + ") reached: " + Mib(stats_.bytes_in_use) +
                                     " in use, " + std::to_string(bytes) + " bytes more asked for");
  }
  STRATA_ASSIGN_OR_RETURN(void* p, base_.Allocate(bytes));
  sizes_.emplace(p, bytes);
  stats_.bytes_in_use += n;
  stats_.bytes_reserved = stats_.bytes_in_use;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  ++stats_.num_allocs;
  return p;
}

void LimitedAllocator::Free(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sizes_.find(p);
  STRATA_CHECK(it != sizes_.end()) << "LimitedAllocator::Free of a block it did not hand out";
  stats_.bytes_in_use -= static_cast<int64_t>(it->second);
  stats_.bytes_reserved = stats_.bytes_in_use;
  ++stats_.num_frees;
  sizes_.erase(it);
  base_.Free(p);
}

AllocatorStats LimitedAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void LimitedAllocator::ResetPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

}  // namespace strata
