// cuda_allocator.cu: CudaCachingAllocator (best-fit reuse of cudaMalloc'd blocks, with stats)
// and CudaDeviceGuard.
#include "common/cuda_allocator.h"

#include <algorithm>
#include <limits>
#include <string>

#include "common/check.h"
#include "common/cuda_check.h"

namespace strata {

namespace {

// Out of memory comes back as ResourceExhausted (CUDA_CHECK maps cudaErrorMemoryAllocation).
Status DeviceMalloc(void** p, size_t bytes) {
  CUDA_CHECK(cudaMalloc(p, bytes));
  return Status::OK();
}

Status DeviceFree(void* p) {
  CUDA_CHECK(cudaFree(p));
  return Status::OK();
}

}  // namespace

CudaDeviceGuard::~CudaDeviceGuard() {
  if (switched_) CUDA_CHECK_FATAL(cudaSetDevice(previous_));
}

Status CudaDeviceGuard::Enter(int device) {
  STRATA_CHECK(!switched_) << "CudaDeviceGuard::Enter called twice";
  CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    CUDA_CHECK(cudaSetDevice(device));
    switched_ = true;
  }
  return Status::OK();
}

CudaCachingAllocator::CudaCachingAllocator(int device) : device_(device) {
  STRATA_CHECK_GE(device, 0);
}

CudaCachingAllocator::~CudaCachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  STRATA_CHECK(used_blocks_.empty()) << used_blocks_.size() << " blocks on cuda:" << device_
                                     << " outlive their allocator (" << stats_.ToString() << ")";
  for (const auto& [size, p] : free_blocks_) {
    cudaError_t err = cudaFree(p);
    // At process exit the runtime may already be torn down; the driver reclaims everything.
    if (err == cudaErrorCudartUnloading) break;
    STRATA_CHECK(err == cudaSuccess) << "cudaFree: " << cudaGetErrorString(err);
  }
}

size_t CudaCachingAllocator::RoundSize(size_t bytes) {
  const size_t granularity = bytes <= kSmallLimit ? kSmallGranularity : kLargeGranularity;
  return (bytes + granularity - 1) / granularity * granularity;
}

Result<void*> CudaCachingAllocator::Allocate(size_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  if (bytes > std::numeric_limits<size_t>::max() / 2) {
    return Status::ResourceExhausted("CUDA allocation of " + std::to_string(bytes) +
                                     " bytes is larger than any address space");
  }
  const size_t size = RoundSize(bytes);
  std::lock_guard<std::mutex> lock(mu_);

  void* p = nullptr;
  size_t block_size = 0;
  auto it = free_blocks_.lower_bound(size);
  if (it != free_blocks_.end() && it->first <= size * kMaxReuseRatio) {
    block_size = it->first;
    p = it->second;
    free_blocks_.erase(it);
    ++stats_.cache_hits;
  } else {
    ++stats_.cache_misses;
    Status status = MallocLocked(size, &p);
    if (status.code() == StatusCode::kResourceExhausted) {
      return Status::ResourceExhausted(
          "CUDA out of memory on cuda:" + std::to_string(device_) + ": cannot allocate " +
          std::to_string(bytes) + " bytes (a " + std::to_string(size) +
          "-byte block) even after emptying the cache; " + stats_.ToString());
    }
    if (!status.ok()) {
      return status.WithContext("allocating " + std::to_string(bytes) +
                                " bytes on cuda:" + std::to_string(device_));
    }
    block_size = size;
    stats_.bytes_reserved += static_cast<int64_t>(size);
  }

  used_blocks_.emplace(p, block_size);
  stats_.bytes_in_use += static_cast<int64_t>(block_size);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  ++stats_.num_allocs;
  return p;
}

void CudaCachingAllocator::Free(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = used_blocks_.find(p);
  STRATA_CHECK(it != used_blocks_.end())
      << "Free of a pointer not in use from the cuda:" << device_ << " caching allocator";
  const size_t size = it->second;
  used_blocks_.erase(it);
  stats_.bytes_in_use -= static_cast<int64_t>(size);
  ++stats_.num_frees;
  free_blocks_.emplace(size, p);
}

void CudaCachingAllocator::ResetPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

AllocatorStats CudaCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

Status CudaCachingAllocator::EmptyCache() {
  std::lock_guard<std::mutex> lock(mu_);
  return EmptyCacheLocked();
}

Status CudaCachingAllocator::MallocLocked(size_t size, void** p) {
  CudaDeviceGuard guard;
  STRATA_RETURN_IF_ERROR(guard.Enter(device_));
  Status first = DeviceMalloc(p, size);
  if (first.code() != StatusCode::kResourceExhausted) return first;
  // Cached blocks of other sizes may be what stands in the way: give them back and retry.
  (void)cudaGetLastError();
  STRATA_RETURN_IF_ERROR(EmptyCacheLocked());
  Status second = DeviceMalloc(p, size);
  if (!second.ok()) (void)cudaGetLastError();
  return second;
}

Status CudaCachingAllocator::EmptyCacheLocked() {
  while (!free_blocks_.empty()) {
    auto it = free_blocks_.begin();
    STRATA_RETURN_IF_ERROR(DeviceFree(it->second));
    stats_.bytes_reserved -= static_cast<int64_t>(it->first);
    free_blocks_.erase(it);
  }
  return Status::OK();
}

}  // namespace strata
