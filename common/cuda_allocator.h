// cuda_allocator.h: CudaCachingAllocator, device memory that is reused instead of returned to
// the driver (cudaMalloc and cudaFree synchronise the device and cost milliseconds).
// Safe to include without CUDA: its classes are declared only when STRATA_HAVE_CUDA is set;
// CudaDeviceAvailable() (allocator.h) works in both builds.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>

#include "common/allocator.h"
#include "common/status.h"

namespace strata {

#if STRATA_HAVE_CUDA

// Makes a CUDA device current for the guard's lifetime and restores the thread's previous one,
// so that work on cuda:1 does not change which device the calling thread uses afterwards.
class CudaDeviceGuard {
 public:
  CudaDeviceGuard() = default;
  ~CudaDeviceGuard();  // aborts if restoring fails: the thread would silently use a wrong device
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

  // Call once. On error, nothing was changed.
  Status Enter(int device);

 private:
  int previous_ = 0;
  bool switched_ = false;
};

// Rounds each request to a block size, keeps freed blocks in a size-ordered free list and hands
// them out again best-fit. Blocks are never split or merged (simple, and the sizes a training
// step asks for repeat every step). When cudaMalloc runs out, the cache is returned to the
// driver and the allocation retried once.
//
// Safe for concurrent use from multiple threads. Not stream-aware: Free makes a block available
// at once, so memory used by work still running on a stream must be freed only after that
// work is ordered before the next user of the block (same stream, an event, or a sync).
class CudaCachingAllocator final : public Allocator {
 public:
  // Requests up to kSmallLimit round to kSmallGranularity, larger ones to kLargeGranularity.
  static constexpr size_t kSmallGranularity = 512;
  static constexpr size_t kSmallLimit = size_t{1} << 20;        // 1 MiB
  static constexpr size_t kLargeGranularity = size_t{2} << 20;  // 2 MiB
  // A cached block serves a request only if at most this many times its rounded size, so a
  // small request cannot pin down a huge block.
  static constexpr size_t kMaxReuseRatio = 2;

  // Makes no CUDA call; an invalid `device` surfaces as an error from Allocate.
  explicit CudaCachingAllocator(int device);
  // Returns the cache to the driver. Every block must have been freed (a live block means a
  // tensor outlived its allocator: a bug).
  ~CudaCachingAllocator() override;
  CudaCachingAllocator(const CudaCachingAllocator&) = delete;
  CudaCachingAllocator& operator=(const CudaCachingAllocator&) = delete;

  // Allocates on this allocator's device whatever the calling thread's current device is.
  Result<void*> Allocate(size_t bytes) override;
  void Free(void* p) override;
  Device device() const override { return Device::CUDA(device_); }
  AllocatorStats stats() const override;
  void ResetPeak() override;

  // Returns every cached (free) block to the driver.
  Status EmptyCache();

  // The block size a request of `bytes` gets.
  static size_t RoundSize(size_t bytes);

 private:
  // cudaMalloc on device_, emptying the cache and retrying once when out of memory.
  Status MallocLocked(size_t size, void** p);  // requires mu_
  Status EmptyCacheLocked();                   // requires mu_

  const int device_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_blocks_;       // size -> block; guarded by mu_
  std::unordered_map<void*, size_t> used_blocks_;  // block -> size; guarded by mu_
  AllocatorStats stats_;                           // guarded by mu_
};

#endif  // STRATA_HAVE_CUDA

}  // namespace strata
