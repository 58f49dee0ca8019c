// allocator.h: the Allocator interface behind tensor storage, its statistics, the aligned host
// allocator, pinned host memory (with CUDA), and CudaDeviceAvailable().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/dtype.h"
#include "common/status.h"

namespace strata {

// Counters an allocator keeps. Byte figures count whole blocks as the allocator rounds them,
// so that bytes_reserved - bytes_in_use is exactly what a cache holds.
struct AllocatorStats {
  int64_t bytes_in_use = 0;       // handed out and not yet freed
  int64_t peak_bytes_in_use = 0;  // high-water mark of bytes_in_use
  int64_t bytes_reserved = 0;     // held from the system: in use plus cached for reuse
  int64_t num_allocs = 0;         // successful non-empty Allocate calls
  int64_t num_frees = 0;
  int64_t cache_hits = 0;    // allocations served from the cache (caching allocators only)
  int64_t cache_misses = 0;  // allocations that went to the system (caching allocators only)

  int64_t bytes_cached() const { return bytes_reserved - bytes_in_use; }
  std::string ToString() const;
};

// Hands out raw memory on one device. Implementations are safe for concurrent use from
// multiple threads. An allocator must outlive every block it handed out (tensors hold a plain
// pointer to the allocator of their storage).
class Allocator {
 public:
  virtual ~Allocator() = default;

  // Returns `bytes` of memory, or ResourceExhausted when the system has none to give. Never
  // aborts on exhaustion. Allocate(0) returns nullptr, which Free accepts and ignores.
  virtual Result<void*> Allocate(size_t bytes) = 0;
  // Returns a block from Allocate on this allocator. Freeing anything else is a bug.
  virtual void Free(void* p) = 0;
  // Where the returned memory lives (pinned host memory is Device::CPU()).
  virtual Device device() const = 0;
  virtual AllocatorStats stats() const { return {}; }
  // Restarts peak_bytes_in_use from the current bytes_in_use, so that a later stats() gives the
  // high-water mark of a phase (a training step). Allocators without stats ignore it.
  virtual void ResetPeak() {}
};

// Host memory from std::aligned_alloc, every block aligned to `alignment` (default 64 bytes:
// a cache line, and enough for any SIMD load). Keeps stats with atomics; never caches.
class AlignedHostAllocator final : public Allocator {
 public:
  static constexpr size_t kDefaultAlignment = 64;

  // `alignment` must be a power of two >= 16 (4096 suits O_DIRECT file I/O). Each block costs
  // `alignment` extra bytes, which hold its size so that Free needs no lookup table.
  explicit AlignedHostAllocator(size_t alignment = kDefaultAlignment);
  AlignedHostAllocator(const AlignedHostAllocator&) = delete;
  AlignedHostAllocator& operator=(const AlignedHostAllocator&) = delete;

  Result<void*> Allocate(size_t bytes) override;
  void Free(void* p) override;
  Device device() const override { return Device::CPU(); }
  AllocatorStats stats() const override;
  void ResetPeak() override;
  size_t alignment() const { return alignment_; }

 private:
  const size_t alignment_;
  std::atomic<int64_t> bytes_in_use_{0};
  std::atomic<int64_t> peak_bytes_in_use_{0};
  std::atomic<int64_t> num_allocs_{0};
  std::atomic<int64_t> num_frees_{0};
};

// A process-wide AlignedHostAllocator for the common case (Tensor::Empty without an allocator).
// An exception to "no singletons" because it has no configuration and no state beyond atomic
// counters: sharing it cannot couple two components' behaviour, only their stats.
Allocator& HostAllocator();

// Keeps freed large host blocks in the process for reuse. By default glibc serves every block
// over a threshold (128 KiB, adapting up to 32 MiB) with a fresh mmap and gives it back on free,
// so each multi-MiB message buffer (a reply being built, a frame ZeroMQ receives, a chunk being
// applied) costs a page fault and a kernel zero-fill per 4 KiB page: on a 2-core host that was
// a third of a 16 MiB dense pull's time. This serves blocks up to 32 MiB from the heap and
// trims the heap only past 1 GiB of free memory at its top. Call once at the start of main(),
// before threads start; processes that move tensors (servers, trainers, benchmarks) do.
// Returns false if glibc refused a setting.
bool TuneHostMallocForLargeBuffers();

// True if the CUDA runtime finds a driver and at least one device. Never aborts; false when
// built without CUDA.
bool CudaDeviceAvailable();

// Page-locked host memory (cudaHostAlloc, portable across devices), which makes host<->device
// copies faster and lets them run asynchronously. Allocation is slow (milliseconds), so keep
// buffers rather than allocating per step. Unavailable when built without CUDA or when no
// device is present.
Result<std::unique_ptr<Allocator>> MakePinnedHostAllocator();

}  // namespace strata
