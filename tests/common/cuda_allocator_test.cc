// cuda_allocator_test.cc: CudaCachingAllocator reuse, statistics and EmptyCache, out-of-memory
// as a Status, and host<->device tensor copies. Skips without a CUDA device.
#include "common/cuda_allocator.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "common/tensor.h"

namespace strata {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

class CudaAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  }
};

// Needs no device: the rounding is arithmetic.
TEST(CudaAllocatorRoundingTest, SmallAndLargeGranularity) {
  EXPECT_EQ(CudaCachingAllocator::RoundSize(1), 512u);
  EXPECT_EQ(CudaCachingAllocator::RoundSize(512), 512u);
  EXPECT_EQ(CudaCachingAllocator::RoundSize(513), 1024u);
  EXPECT_EQ(CudaCachingAllocator::RoundSize(kMiB), kMiB);
  EXPECT_EQ(CudaCachingAllocator::RoundSize(kMiB + 1), 2 * kMiB);
  EXPECT_EQ(CudaCachingAllocator::RoundSize(5 * kMiB), 6 * kMiB);
}

TEST_F(CudaAllocatorTest, FreedBlocksAreReused) {
  CudaCachingAllocator allocator(0);
  EXPECT_EQ(allocator.device(), Device::CUDA(0));
  Result<void*> first = allocator.Allocate(1000);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  AllocatorStats s = allocator.stats();
  EXPECT_EQ(s.cache_misses, 1);
  EXPECT_EQ(s.bytes_in_use, 1024);
  EXPECT_EQ(s.bytes_reserved, 1024);
  allocator.Free(*first);
  EXPECT_EQ(allocator.stats().bytes_in_use, 0);
  EXPECT_EQ(allocator.stats().bytes_reserved, 1024);  // cached, not returned

  Result<void*> again = allocator.Allocate(1000);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first);
  s = allocator.stats();
  EXPECT_EQ(s.cache_hits, 1);
  EXPECT_EQ(s.cache_misses, 1);
  EXPECT_EQ(s.num_allocs, 2);
  EXPECT_EQ(s.num_frees, 1);
  allocator.Free(*again);
}

TEST_F(CudaAllocatorTest, BestFitWithinTheReuseLimit) {
  CudaCachingAllocator allocator(0);
  Result<void*> big = allocator.Allocate(4 * kMiB);
  Result<void*> small = allocator.Allocate(1024);
  ASSERT_TRUE(big.ok() && small.ok());
  allocator.Free(*big);
  allocator.Free(*small);

  // 600 bytes round to 1 KiB: the 1 KiB block fits best, the 4 MiB one is never considered.
  Result<void*> a = allocator.Allocate(600);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, *small);
  // 3 MiB rounds to 4 MiB: served by the cached 4 MiB block.
  Result<void*> b = allocator.Allocate(3 * kMiB);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, *big);
  // 100 bytes (a 512-byte block): nothing cached is small enough to be worth it.
  Result<void*> c = allocator.Allocate(100);
  ASSERT_TRUE(c.ok());
  AllocatorStats s = allocator.stats();
  EXPECT_EQ(s.cache_hits, 2);
  EXPECT_EQ(s.cache_misses, 3);
  EXPECT_EQ(s.bytes_in_use, static_cast<int64_t>(4 * kMiB + 1024 + 512));
  EXPECT_EQ(s.peak_bytes_in_use, s.bytes_in_use);
  for (void* p : {*a, *b, *c}) allocator.Free(p);
}

TEST_F(CudaAllocatorTest, EmptyCacheReturnsOnlyFreeBlocks) {
  CudaCachingAllocator allocator(0);
  Result<void*> kept = allocator.Allocate(2 * kMiB);
  Result<void*> dropped = allocator.Allocate(8 * kMiB);
  ASSERT_TRUE(kept.ok() && dropped.ok());
  allocator.Free(*dropped);
  EXPECT_EQ(allocator.stats().bytes_reserved, static_cast<int64_t>(10 * kMiB));
  ASSERT_TRUE(allocator.EmptyCache().ok());
  AllocatorStats s = allocator.stats();
  EXPECT_EQ(s.bytes_reserved, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(s.bytes_in_use, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(s.peak_bytes_in_use, static_cast<int64_t>(10 * kMiB));
  allocator.Free(*kept);
  ASSERT_TRUE(allocator.EmptyCache().ok());
  EXPECT_EQ(allocator.stats().bytes_reserved, 0);
  // After emptying, the next allocation is a miss again.
  Result<void*> p = allocator.Allocate(2 * kMiB);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(allocator.stats().cache_misses, 3);
  allocator.Free(*p);
}

TEST_F(CudaAllocatorTest, OutOfMemoryIsAStatus) {
  CudaCachingAllocator allocator(0);
  Result<void*> cached = allocator.Allocate(kMiB);
  ASSERT_TRUE(cached.ok());
  allocator.Free(*cached);
  const size_t petabyte = size_t{1} << 50;
  Result<void*> p = allocator.Allocate(petabyte);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted) << p.status().ToString();
  EXPECT_NE(p.status().message().find(std::to_string(petabyte)), std::string::npos)
      << p.status().ToString();
  EXPECT_EQ(allocator.stats().bytes_reserved, 0);  // the cache was emptied before the retry
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);      // and the error did not linger
  Result<void*> after = allocator.Allocate(kMiB);  // the allocator still works
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  allocator.Free(*after);
}

TEST_F(CudaAllocatorTest, ConcurrentUseKeepsStatsExact) {
  CudaCachingAllocator allocator(0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&allocator, t] {
      for (int i = 0; i < 200; ++i) {
        Result<void*> p = allocator.Allocate(static_cast<size_t>(512 * (1 + (i + t) % 4)));
        ASSERT_TRUE(p.ok()) << p.status().ToString();
        allocator.Free(*p);
      }
    });
  }
  for (auto& t : threads) t.join();
  AllocatorStats s = allocator.stats();
  EXPECT_EQ(s.num_allocs, 800);
  EXPECT_EQ(s.num_frees, 800);
  EXPECT_EQ(s.cache_hits + s.cache_misses, 800);
  EXPECT_LE(s.cache_misses, 16);  // at most one block per size per thread
  EXPECT_EQ(s.bytes_in_use, 0);
}

TEST_F(CudaAllocatorTest, HostDeviceRoundTripThroughTensors) {
  CudaCachingAllocator allocator(0);  // declared first: outlives the tensors
  const Shape shape = {64, 33};
  Result<Tensor> host = Tensor::Empty(shape, DType::kF32);
  ASSERT_TRUE(host.ok());
  for (int64_t i = 0; i < host->numel(); ++i) host->data_as<float>()[i] = 0.5f * i;

  Result<Tensor> device = Tensor::Empty(shape, DType::kF32, allocator);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  EXPECT_EQ(device->device(), Device::CUDA(0));
  EXPECT_EQ(device->ToString(), "Tensor(shape=[64, 33], dtype=f32, device=cuda:0)");
  ASSERT_TRUE(device->CopyFrom(*host).ok());

  Result<Tensor> device2 = Tensor::Zeros(shape, DType::kF32, allocator);  // device -> device
  ASSERT_TRUE(device2.ok());
  ASSERT_TRUE(device2->CopyFrom(*device).ok());

  Result<Tensor> back = Tensor::Zeros(shape, DType::kF32);
  ASSERT_TRUE(back.ok());
  ASSERT_TRUE(back->CopyFrom(*device2).ok());
  EXPECT_EQ(std::memcmp(back->data(), host->data(), host->nbytes()), 0);

  // Zeros on the device really are zeros.
  Result<Tensor> zeros = Tensor::Zeros({100}, DType::kI32, allocator);
  Result<Tensor> zeros_back = Tensor::Empty({100}, DType::kI32);
  ASSERT_TRUE(zeros.ok() && zeros_back.ok());
  std::memset(zeros_back->data(), 0xFF, zeros_back->nbytes());
  ASSERT_TRUE(zeros_back->CopyFrom(*zeros).ok());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(zeros_back->data_as<int32_t>()[i], 0);

  // Strided copies to or from a device are not implemented yet, and say so.
  Result<Tensor> square = Tensor::Empty({33, 64}, DType::kF32, allocator);
  ASSERT_TRUE(square.ok());
  EXPECT_EQ(square->CopyFrom(host->Transpose(0, 1)).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(square->Transpose(0, 1).Contiguous().status().code(), StatusCode::kUnimplemented);
}

TEST_F(CudaAllocatorTest, PinnedHostRoundTrip) {
  Result<std::unique_ptr<Allocator>> pinned = MakePinnedHostAllocator();
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  CudaCachingAllocator allocator(0);
  {
    Result<Tensor> src = Tensor::Empty({1 << 16}, DType::kBF16, **pinned);
    Result<Tensor> dst = Tensor::Zeros({1 << 16}, DType::kBF16, **pinned);
    Result<Tensor> device = Tensor::Empty({1 << 16}, DType::kBF16, allocator);
    ASSERT_TRUE(src.ok() && dst.ok() && device.ok());
    EXPECT_TRUE(src->is_cpu());
    for (int i = 0; i < (1 << 16); ++i) src->data_as<uint16_t>()[i] = static_cast<uint16_t>(i);
    ASSERT_TRUE(device->CopyFrom(*src).ok());
    ASSERT_TRUE(dst->CopyFrom(*device).ok());
    EXPECT_EQ(std::memcmp(src->data(), dst->data(), src->nbytes()), 0);
    EXPECT_EQ((*pinned)->stats().bytes_in_use, 2 * (1 << 17));
  }
  EXPECT_EQ((*pinned)->stats().bytes_in_use, 0);
}

}  // namespace
}  // namespace strata
