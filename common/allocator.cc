// allocator.cc: AlignedHostAllocator, the process-wide host allocator, pinned host memory and
// CudaDeviceAvailable().
#include "common/allocator.h"

#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <unordered_map>

#include "common/check.h"

#if STRATA_HAVE_CUDA
#include "common/cuda_check.h"
#endif

namespace strata {

std::string AllocatorStats::ToString() const {
  return "bytes_in_use=" + std::to_string(bytes_in_use) +
         " peak_bytes_in_use=" + std::to_string(peak_bytes_in_use) +
         " bytes_reserved=" + std::to_string(bytes_reserved) +
         " num_allocs=" + std::to_string(num_allocs) + " num_frees=" + std::to_string(num_frees) +
         " cache_hits=" + std::to_string(cache_hits) +
         " cache_misses=" + std::to_string(cache_misses);
}

namespace {

// Sits just before each block AlignedHostAllocator hands out. The magic catches frees of
// pointers that did not come from an AlignedHostAllocator.
struct BlockHeader {
  uint64_t size;  // the block's rounded size, for the stats
  uint64_t magic;
};
constexpr uint64_t kBlockMagic = 0x5354524154414C43ull;  // "STRATALC"

void RaisePeak(std::atomic<int64_t>& peak, int64_t value) {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (seen < value && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

AlignedHostAllocator::AlignedHostAllocator(size_t alignment) : alignment_(alignment) {
  STRATA_CHECK(alignment >= sizeof(BlockHeader) && (alignment & (alignment - 1)) == 0)
      << "alignment must be a power of two >= 16, got " << alignment;
}

Result<void*> AlignedHostAllocator::Allocate(size_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  // The block is rounded up to the alignment (std::aligned_alloc requires it), and one more
  // alignment unit in front holds the header while keeping the returned pointer aligned.
  if (bytes > std::numeric_limits<size_t>::max() / 2) {
    return Status::ResourceExhausted("host allocation of " + std::to_string(bytes) +
                                     " bytes is larger than any address space");
  }
  const size_t rounded = (bytes + alignment_ - 1) & ~(alignment_ - 1);
  void* base = std::aligned_alloc(alignment_, rounded + alignment_);
  if (base == nullptr) {
    return Status::ResourceExhausted("host allocation of " + std::to_string(bytes) +
                                     " bytes failed (" + stats().ToString() + ")");
  }
  auto* block = static_cast<char*>(base) + alignment_;
  auto* header = reinterpret_cast<BlockHeader*>(block) - 1;
  header->size = rounded;
  header->magic = kBlockMagic;

  const auto size = static_cast<int64_t>(rounded);
  RaisePeak(peak_bytes_in_use_, bytes_in_use_.fetch_add(size, std::memory_order_relaxed) + size);
  num_allocs_.fetch_add(1, std::memory_order_relaxed);
  return static_cast<void*>(block);
}

void AlignedHostAllocator::Free(void* p) {
  if (p == nullptr) return;
  auto* header = static_cast<BlockHeader*>(p) - 1;
  STRATA_CHECK_EQ(header->magic, kBlockMagic) << "Free of a pointer not from this allocator";
  header->magic = 0;
  bytes_in_use_.fetch_sub(static_cast<int64_t>(header->size), std::memory_order_relaxed);
  num_frees_.fetch_add(1, std::memory_order_relaxed);
  std::free(static_cast<char*>(p) - alignment_);
}

void AlignedHostAllocator::ResetPeak() {
  peak_bytes_in_use_.store(bytes_in_use_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

AllocatorStats AlignedHostAllocator::stats() const {
  AllocatorStats s;
  s.bytes_in_use = bytes_in_use_.load(std::memory_order_relaxed);
  s.peak_bytes_in_use = peak_bytes_in_use_.load(std::memory_order_relaxed);
  s.bytes_reserved = s.bytes_in_use;  // nothing is cached
  s.num_allocs = num_allocs_.load(std::memory_order_relaxed);
  s.num_frees = num_frees_.load(std::memory_order_relaxed);
  return s;
}

Allocator& HostAllocator() {
  // Never destroyed: tensors in other static objects may free into it during exit.
  static auto* allocator = new AlignedHostAllocator();
  return *allocator;
}

bool TuneHostMallocForLargeBuffers() {
  // 32 MiB is the most glibc accepts for M_MMAP_THRESHOLD (half its per-thread heap size).
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
  return mmap_ok && trim_ok;
}

#if STRATA_HAVE_CUDA

bool CudaDeviceAvailable() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear it, so a later launch check does not report it
    return false;
  }
  return count > 0;
}

namespace {

Status PinnedAlloc(void** p, size_t bytes) {
  CUDA_CHECK(cudaHostAlloc(p, bytes, cudaHostAllocPortable));
  return Status::OK();
}

// Not caching: pinning is slow, so its users (the offload copy engine) keep their buffers.
class PinnedHostAllocator final : public Allocator {
 public:
  PinnedHostAllocator() = default;
  PinnedHostAllocator(const PinnedHostAllocator&) = delete;
  PinnedHostAllocator& operator=(const PinnedHostAllocator&) = delete;
  ~PinnedHostAllocator() override {
    STRATA_CHECK(sizes_.empty()) << sizes_.size() << " pinned blocks outlive their allocator";
  }

  Result<void*> Allocate(size_t bytes) override {
    if (bytes == 0) return static_cast<void*>(nullptr);
    void* p = nullptr;
    Status status = PinnedAlloc(&p, bytes);
    if (!status.ok()) {
      (void)cudaGetLastError();
      return status.WithContext("pinned host allocation of " + std::to_string(bytes) + " bytes (" +
                                stats().ToString() + ")");
    }
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[p] = bytes;
    stats_.bytes_in_use += static_cast<int64_t>(bytes);
    stats_.bytes_reserved = stats_.bytes_in_use;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    ++stats_.num_allocs;
    return p;
  }

  void Free(void* p) override {
    if (p == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = sizes_.find(p);
      STRATA_CHECK(it != sizes_.end()) << "Free of a pointer not from this pinned allocator";
      stats_.bytes_in_use -= static_cast<int64_t>(it->second);
      stats_.bytes_reserved = stats_.bytes_in_use;
      ++stats_.num_frees;
      sizes_.erase(it);
    }
    CUDA_CHECK_FATAL(cudaFreeHost(p));
  }

  Device device() const override { return Device::CPU(); }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void ResetPeak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> sizes_;  // guarded by mu_
  AllocatorStats stats_;                     // guarded by mu_
};

}  // namespace

Result<std::unique_ptr<Allocator>> MakePinnedHostAllocator() {
  if (!CudaDeviceAvailable()) {
    return Status::Unavailable("pinned host memory needs a CUDA device, and none was found");
  }
  return std::unique_ptr<Allocator>(std::make_unique<PinnedHostAllocator>());
}

#else  // !STRATA_HAVE_CUDA

bool CudaDeviceAvailable() { return false; }

Result<std::unique_ptr<Allocator>> MakePinnedHostAllocator() {
  return Status::Unavailable("pinned host memory needs CUDA, and strata was built without it");
}

#endif  // STRATA_HAVE_CUDA

}  // namespace strata
