// tensor_test.cc: Device, the host allocators, and Tensor construction, views, copies and
// printing (DType and its conversions: dtype_test.cc).
#include "common/tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <sstream>
#include <thread>
#include <vector>

#include "common/allocator.h"
#include "common/limited_allocator.h"
#include "common/dtype.h"

namespace strata {
namespace {

// AddressSanitizer aborts on absurd allocation sizes instead of returning null (unless run with
// allocator_may_return_null=1), so the exhaustion checks step aside under it.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUnderAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kUnderAsan = true;
#else
constexpr bool kUnderAsan = false;
#endif
#else
constexpr bool kUnderAsan = false;
#endif

// --- Device

TEST(TensorDeviceTest, PrintsAndParses) {
  EXPECT_EQ(Device::CPU().ToString(), "cpu");
  EXPECT_EQ(Device::CUDA(1).ToString(), "cuda:1");
  EXPECT_EQ(Device{}, Device::CPU());
  EXPECT_NE(Device::CUDA(0), Device::CUDA(1));
  EXPECT_NE(Device::CUDA(0), Device::CPU());
  for (Device d : {Device::CPU(), Device::CUDA(0), Device::CUDA(7)}) {
    Result<Device> parsed = ParseDevice(d.ToString());
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, d);
  }
  Result<Device> cuda = ParseDevice("cuda");
  ASSERT_TRUE(cuda.ok());
  EXPECT_EQ(*cuda, Device::CUDA(0));
  for (const char* bad : {"", "gpu", "CPU", "cuda:", "cuda:-1", "cuda:1x", "cuda:+1", "cpu:0"}) {
    Result<Device> parsed = ParseDevice(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  }
}

// --- Allocators

TEST(AllocatorTest, AlignedHostBlocksAreAlignedAndCounted) {
  AlignedHostAllocator allocator;
  std::vector<void*> blocks;
  int64_t expected = 0;
  for (size_t bytes : {1, 63, 64, 65, 1000, 1 << 20}) {
    Result<void*> p = allocator.Allocate(bytes);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % 64, 0u);
    std::memset(*p, 0xAB, bytes);  // the whole block is writable
    blocks.push_back(*p);
    expected += static_cast<int64_t>((bytes + 63) / 64 * 64);
  }
  AllocatorStats s = allocator.stats();
  EXPECT_EQ(s.bytes_in_use, expected);
  EXPECT_EQ(s.peak_bytes_in_use, expected);
  EXPECT_EQ(s.bytes_reserved, expected);
  EXPECT_EQ(s.num_allocs, 6);
  EXPECT_EQ(s.num_frees, 0);
  for (void* p : blocks) allocator.Free(p);
  s = allocator.stats();
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.peak_bytes_in_use, expected);
  EXPECT_EQ(s.num_frees, 6);
  EXPECT_EQ(s.cache_hits, 0);
  EXPECT_EQ(allocator.device(), Device::CPU());
}

// A phase's high-water mark (a training step's): ResetPeak restarts it from what is in use.
TEST(AllocatorTest, ResetPeakMeasuresAPhase) {
  AlignedHostAllocator allocator;
  void* kept = *allocator.Allocate(128);
  void* big = *allocator.Allocate(4096);
  allocator.Free(big);
  EXPECT_EQ(allocator.stats().peak_bytes_in_use, 128 + 4096);
  allocator.ResetPeak();
  EXPECT_EQ(allocator.stats().peak_bytes_in_use, 128);
  void* small = *allocator.Allocate(64);
  allocator.Free(small);
  EXPECT_EQ(allocator.stats().peak_bytes_in_use, 128 + 64);
  allocator.Free(kept);
}

TEST(AllocatorTest, LimitedAllocatorRefusesPastItsLimitNamingTheSetting) {
  AlignedHostAllocator base;
  LimitedAllocator limited(base, 1000, "train.memory_limit_mb");
  Result<void*> a = limited.Allocate(600);
  ASSERT_TRUE(a.ok());
  Result<void*> b = limited.Allocate(500);  // 1100 > 1000: refused, nothing taken from base
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(b.status().message().find("train.memory_limit_mb"), std::string::npos) << b.status().ToString();
  EXPECT_EQ(base.stats().num_allocs, 1);
  EXPECT_EQ(limited.stats().bytes_in_use, 600);
  limited.Free(*a);  // room again
  Result<void*> c = limited.Allocate(1000);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(limited.stats().peak_bytes_in_use, 1000);
  limited.Free(*c);
  EXPECT_EQ(limited.stats().bytes_in_use, 0);
  EXPECT_EQ(base.stats().bytes_in_use, 0);
}

TEST(AllocatorTest, ZeroBytesIsNull) {
  AlignedHostAllocator allocator;
  Result<void*> p = allocator.Allocate(0);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, nullptr);
  allocator.Free(nullptr);
  EXPECT_EQ(allocator.stats().num_allocs, 0);
  EXPECT_EQ(allocator.stats().num_frees, 0);
}

TEST(AllocatorTest, LargerAlignment) {
  AlignedHostAllocator allocator(4096);
  Result<void*> p = allocator.Allocate(10);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % 4096, 0u);
  EXPECT_EQ(allocator.stats().bytes_in_use, 4096);
  allocator.Free(*p);
}

TEST(AllocatorTest, ExhaustionIsAStatus) {
  if (kUnderAsan) GTEST_SKIP() << "AddressSanitizer aborts on huge allocations";
  AlignedHostAllocator allocator;
  for (size_t bytes : {size_t{1} << 60, std::numeric_limits<size_t>::max()}) {
    Result<void*> p = allocator.Allocate(bytes);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted) << p.status().ToString();
  }
  EXPECT_EQ(allocator.stats().bytes_in_use, 0);
}

TEST(AllocatorTest, ConcurrentUseKeepsStatsExact) {
  AlignedHostAllocator allocator;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&allocator, t] {
      for (int i = 0; i < 1000; ++i) {
        Result<void*> p = allocator.Allocate(static_cast<size_t>(64 * (1 + (i + t) % 5)));
        ASSERT_TRUE(p.ok());
        allocator.Free(*p);
      }
    });
  }
  for (auto& t : threads) t.join();
  AllocatorStats s = allocator.stats();
  EXPECT_EQ(s.num_allocs, 4000);
  EXPECT_EQ(s.num_frees, 4000);
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_GE(s.peak_bytes_in_use, 64);
  EXPECT_LE(s.peak_bytes_in_use, 4 * 5 * 64);
}

TEST(AllocatorTest, HostAllocatorIsSharedAndOnTheCpu) {
  EXPECT_EQ(&HostAllocator(), &HostAllocator());
  EXPECT_EQ(HostAllocator().device(), Device::CPU());
}

TEST(AllocatorTest, PinnedNeedsADevice) {
  Result<std::unique_ptr<Allocator>> pinned = MakePinnedHostAllocator();
#if !STRATA_HAVE_CUDA
  EXPECT_FALSE(CudaDeviceAvailable());
#endif
  if (!CudaDeviceAvailable()) {
    ASSERT_FALSE(pinned.ok());
    EXPECT_EQ(pinned.status().code(), StatusCode::kUnavailable);
    return;
  }
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  Result<void*> p = (*pinned)->Allocate(4096);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::memset(*p, 1, 4096);
  EXPECT_EQ((*pinned)->stats().bytes_in_use, 4096);
  (*pinned)->Free(*p);
  EXPECT_EQ((*pinned)->stats().bytes_in_use, 0);
  EXPECT_EQ((*pinned)->device(), Device::CPU());
}

TEST(AllocatorTest, StatsPrint) {
  AllocatorStats s;
  s.bytes_in_use = 10;
  s.bytes_reserved = 30;
  EXPECT_EQ(s.bytes_cached(), 20);
  EXPECT_NE(s.ToString().find("bytes_in_use=10"), std::string::npos);
}

// --- Tensor

// An f32 tensor holding 0, 1, 2, ... in row-major order.
Tensor Iota(Shape shape) {
  Result<Tensor> t = Tensor::Empty(std::move(shape), DType::kF32);
  STRATA_CHECK(t.ok()) << t.status().ToString();
  float* p = t->data_as<float>();
  for (int64_t i = 0; i < t->numel(); ++i) p[i] = static_cast<float>(i);
  return *t;
}

// Element (i, j) of a 2-d f32 tensor, through its strides.
float At(const Tensor& t, int64_t i, int64_t j) {
  return t.data_as<float>()[i * t.stride(0) + j * t.stride(1)];
}

TEST(TensorTest, EmptyHasShapeStridesAndAlignedData) {
  Result<Tensor> t = Tensor::Empty({2, 3, 4}, DType::kBF16);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->defined());
  EXPECT_EQ(t->dim(), 3);
  EXPECT_EQ(t->shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t->strides(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(t->numel(), 24);
  EXPECT_EQ(t->nbytes(), 48u);
  EXPECT_EQ(t->element_size(), 2u);
  EXPECT_EQ(t->device(), Device::CPU());
  EXPECT_TRUE(t->is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data()) % 64, 0u);
  EXPECT_EQ(t->storage()->nbytes(), 48u);
  EXPECT_EQ(t->data_as<uint16_t>(), t->data());
}

TEST(TensorTest, ScalarAndEmptyShapes) {
  Result<Tensor> scalar = Tensor::Zeros({}, DType::kI64);
  ASSERT_TRUE(scalar.ok());
  EXPECT_EQ(scalar->numel(), 1);
  EXPECT_EQ(scalar->dim(), 0);
  EXPECT_EQ(*scalar->data_as<int64_t>(), 0);

  Result<Tensor> none = Tensor::Zeros({0, 3}, DType::kF32);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->numel(), 0);
  EXPECT_EQ(none->nbytes(), 0u);
  EXPECT_TRUE(none->is_contiguous());
  Result<Tensor> other = Tensor::Empty({0, 3}, DType::kF32);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(none->CopyFrom(*other).ok());
  EXPECT_EQ(none->ToString(), "Tensor(shape=[0, 3], dtype=f32, device=cpu)");
}

TEST(TensorTest, ZerosAreZero) {
  Result<Tensor> t = Tensor::Zeros({5, 7}, DType::kI32);
  ASSERT_TRUE(t.ok());
  const int32_t* p = t->data_as<int32_t>();
  EXPECT_TRUE(std::all_of(p, p + 35, [](int32_t v) { return v == 0; }));
}

TEST(TensorTest, BadShapesAreStatuses) {
  Result<Tensor> negative = Tensor::Empty({2, -1}, DType::kF32);
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalidArgument);
  Result<Tensor> overflow = Tensor::Empty({int64_t{1} << 40, int64_t{1} << 40}, DType::kF32);
  ASSERT_FALSE(overflow.ok());
  EXPECT_EQ(overflow.status().code(), StatusCode::kInvalidArgument);
  Result<Tensor> bytes_overflow = Tensor::Empty({int64_t{1} << 62}, DType::kI64);
  ASSERT_FALSE(bytes_overflow.ok());
  EXPECT_EQ(bytes_overflow.status().code(), StatusCode::kInvalidArgument);
  if (!kUnderAsan) {
    Result<Tensor> huge = Tensor::Empty({int64_t{1} << 58}, DType::kU8);
    ASSERT_FALSE(huge.ok());
    EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted);
  }
  EXPECT_FALSE(ShapeNumel({3, -2}).ok());
  EXPECT_EQ(*ShapeNumel({3, 0, 5}), 0);
  EXPECT_EQ(*ShapeNumel({}), 1);
}

TEST(TensorTest, StorageIsFreedThroughItsAllocatorAfterTheLastView) {
  AlignedHostAllocator allocator;
  {
    Result<Tensor> t = Tensor::Empty({16, 16}, DType::kF32, allocator);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->storage()->allocator(), &allocator);
    EXPECT_EQ(allocator.stats().bytes_in_use, 1024);
    Tensor view = t->Narrow(0, 4, 2);
    *t = Tensor();
    EXPECT_EQ(allocator.stats().bytes_in_use, 1024);  // the view still holds it
  }
  EXPECT_EQ(allocator.stats().bytes_in_use, 0);
  EXPECT_EQ(allocator.stats().num_frees, 1);
}

TEST(TensorTest, NarrowSharesStorageAndSeesWrites) {
  Tensor t = Iota({4, 5});
  Tensor rows = t.Narrow(0, 1, 2);
  EXPECT_EQ(rows.shape(), (Shape{2, 5}));
  EXPECT_EQ(rows.strides(), (std::vector<int64_t>{5, 1}));
  EXPECT_TRUE(rows.is_contiguous());
  EXPECT_EQ(rows.storage(), t.storage());
  EXPECT_EQ(rows.storage_offset(), 5 * sizeof(float));
  EXPECT_EQ(At(rows, 0, 0), 5.0f);

  Tensor cols = t.Narrow(1, 2, 3);
  EXPECT_EQ(cols.shape(), (Shape{4, 3}));
  EXPECT_EQ(cols.strides(), (std::vector<int64_t>{5, 1}));
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(At(cols, 1, 0), 7.0f);

  cols.data_as<float>()[0] = -1.0f;  // element (0, 2) of t
  EXPECT_EQ(At(t, 0, 2), -1.0f);
  rows.data_as<float>()[1] = -2.0f;  // element (1, 1) of t
  EXPECT_EQ(At(t, 1, 1), -2.0f);
  EXPECT_EQ(t.Narrow(0, 4, 0).numel(), 0);
}

TEST(TensorTest, SelectDropsADimension) {
  Tensor t = Iota({3, 4, 5});
  Tensor plane = t.Select(0, 2);
  EXPECT_EQ(plane.shape(), (Shape{4, 5}));
  EXPECT_EQ(At(plane, 0, 0), 40.0f);
  Tensor column = t.Select(2, 3);
  EXPECT_EQ(column.shape(), (Shape{3, 4}));
  EXPECT_EQ(column.strides(), (std::vector<int64_t>{20, 5}));
  EXPECT_EQ(At(column, 1, 2), 1 * 20 + 2 * 5 + 3.0f);
  Tensor scalar = t.Select(0, 1).Select(0, 1).Select(0, 1);
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(*scalar.data_as<float>(), 20 + 5 + 1.0f);
}

TEST(TensorTest, TransposeSwapsStrides) {
  Tensor t = Iota({2, 3});
  Tensor tt = t.Transpose(0, 1);
  EXPECT_EQ(tt.shape(), (Shape{3, 2}));
  EXPECT_EQ(tt.strides(), (std::vector<int64_t>{1, 3}));
  EXPECT_FALSE(tt.is_contiguous());
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 2; ++j) EXPECT_EQ(At(tt, i, j), At(t, j, i));
  }
  EXPECT_TRUE(tt.Transpose(0, 1).is_contiguous());
  // Dimensions of size 1 do not break contiguity, whatever their stride.
  Tensor row = Iota({1, 4});
  EXPECT_TRUE(row.Transpose(0, 1).Transpose(0, 1).is_contiguous());
  EXPECT_TRUE(Iota({4, 1}).Transpose(0, 1).is_contiguous());
}

TEST(TensorTest, ReshapeInfersAndValidates) {
  Tensor t = Iota({2, 3, 4});
  Result<Tensor> r = t.Reshape({6, -1});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->shape(), (Shape{6, 4}));
  EXPECT_EQ(r->strides(), (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(r->storage(), t.storage());
  r->data_as<float>()[5] = 100.0f;
  EXPECT_EQ(t.data_as<float>()[5], 100.0f);

  Result<Tensor> flat = t.Narrow(0, 1, 1).Reshape({-1});
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->shape(), (Shape{12}));
  EXPECT_EQ(*flat->data_as<float>(), 12.0f);  // keeps the view's offset

  for (Shape bad : {Shape{5, 5}, Shape{-1, -1}, Shape{5, -1}, Shape{-2, 12}, Shape{0, -1}}) {
    Result<Tensor> e = t.Reshape(bad);
    ASSERT_FALSE(e.ok()) << ShapeToString(bad);
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << ShapeToString(bad);
  }
  Result<Tensor> strided = t.Transpose(0, 2).Reshape({24});
  ASSERT_FALSE(strided.ok());
  EXPECT_EQ(strided.status().code(), StatusCode::kFailedPrecondition);
}

TEST(TensorTest, ContiguousCopiesOnlyWhenNeeded) {
  Tensor t = Iota({3, 4});
  Result<Tensor> same = t.Contiguous();
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->storage(), t.storage());

  Result<Tensor> c = t.Transpose(0, 1).Contiguous();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_NE(c->storage(), t.storage());
  EXPECT_TRUE(c->is_contiguous());
  EXPECT_EQ(c->shape(), (Shape{4, 3}));
  const float expected[] = {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(c->data_as<float>()[i], expected[i]);
}

TEST(TensorTest, CopyFromHandlesStridesAndRejectsMismatches) {
  Tensor src = Iota({3, 4});
  Result<Tensor> dst = Tensor::Zeros({4, 3}, DType::kF32);
  ASSERT_TRUE(dst.ok());
  // Write src into dst's transpose: dst becomes src transposed.
  ASSERT_TRUE(dst->Transpose(0, 1).CopyFrom(src).ok());
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(At(*dst, i, j), At(src, j, i));
  }
  // Both sides strided: a column of one into a column of another.
  Tensor a = Iota({4, 4});
  Result<Tensor> b = Tensor::Zeros({4, 4}, DType::kF32);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b->Narrow(1, 3, 1).CopyFrom(a.Narrow(1, 1, 1)).ok());
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(At(*b, i, 3), At(a, i, 1));
    EXPECT_EQ(At(*b, i, 0), 0.0f);
  }
  Status shape = dst->CopyFrom(src);
  EXPECT_EQ(shape.code(), StatusCode::kInvalidArgument);
  Result<Tensor> ints = Tensor::Zeros({3, 4}, DType::kI32);
  ASSERT_TRUE(ints.ok());
  EXPECT_EQ(ints->CopyFrom(src).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(src.CopyFrom(src).ok());  // a no-op
}

TEST(TensorTest, FromBlobKeepsItsOwnerAliveUntilTheLastTensor) {
  auto buffer = std::make_shared<std::vector<float>>(12, 1.5f);
  std::weak_ptr<std::vector<float>> watch = buffer;
  float* raw = buffer->data();
  Tensor view;
  {
    Tensor t = Tensor::FromBlob(raw, {3, 4}, DType::kF32, Device::CPU(), std::move(buffer));
    EXPECT_EQ(t.data(), raw);
    EXPECT_EQ(t.storage()->allocator(), nullptr);
    view = t.Select(0, 2);
    EXPECT_FALSE(watch.expired());
  }
  EXPECT_FALSE(watch.expired());  // the view still needs the bytes
  EXPECT_EQ(view.data_as<float>()[3], 1.5f);
  view = Tensor();
  EXPECT_TRUE(watch.expired());
}

TEST(TensorTest, FromBufferValidatesUntrustedShapes) {
  std::vector<uint8_t> frame(24);
  Result<Tensor> ok =
      Tensor::FromBuffer(frame.data(), frame.size(), {2, 3}, DType::kI32, Device::CPU(), nullptr);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->numel(), 6);
  Result<Tensor> short_frame =
      Tensor::FromBuffer(frame.data(), frame.size(), {2, 4}, DType::kI32, Device::CPU(), nullptr);
  EXPECT_EQ(short_frame.status().code(), StatusCode::kInvalidArgument);
  Result<Tensor> negative =
      Tensor::FromBuffer(frame.data(), frame.size(), {-2, -3}, DType::kI32, Device::CPU(), nullptr);
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalidArgument);
  Result<Tensor> overflow = Tensor::FromBuffer(frame.data(), frame.size(), {int64_t{1} << 62, 4},
                                               DType::kI32, Device::CPU(), nullptr);
  EXPECT_EQ(overflow.status().code(), StatusCode::kInvalidArgument);
}

TEST(TensorTest, ToStringShowsShapeDtypeDeviceAndValues) {
  Tensor t = Iota({2, 3});
  EXPECT_EQ(t.ToString(), "Tensor(shape=[2, 3], dtype=f32, device=cpu, values=[0, 1, 2, 3, 4, 5])");
  EXPECT_EQ(t.Transpose(0, 1).ToString(),
            "Tensor(shape=[3, 2], dtype=f32, device=cpu, strides=[1, 3], "
            "values=[0, 3, 1, 4, 2, 5])");
  EXPECT_EQ(Iota({20}).ToString(),
            "Tensor(shape=[20], dtype=f32, device=cpu, values=[0, 1, 2, 3, 4, 5, 6, 7, ...])");
  Result<Tensor> h = Tensor::Empty({2}, DType::kBF16);
  ASSERT_TRUE(h.ok());
  h->data_as<uint16_t>()[0] = FloatToBF16(1.5f);
  h->data_as<uint16_t>()[1] = FloatToBF16(-2.0f);
  EXPECT_EQ(h->ToString(), "Tensor(shape=[2], dtype=bf16, device=cpu, values=[1.5, -2])");
  EXPECT_EQ(Tensor().ToString(), "Tensor(undefined)");
  EXPECT_EQ(Tensor().numel(), 0);
  std::ostringstream os;
  os << t.Select(0, 1);
  EXPECT_EQ(os.str(), "Tensor(shape=[3], dtype=f32, device=cpu, values=[3, 4, 5])");
}

#if !STRATA_HAVE_CUDA
TEST(TensorTest, CudaTensorsNeedCuda) {
  int fake = 0;
  Tensor device = Tensor::FromBlob(&fake, {1}, DType::kI32, Device::CUDA(0), nullptr);
  EXPECT_TRUE(device.is_cuda());
  EXPECT_EQ(device.ToString(), "Tensor(shape=[1], dtype=i32, device=cuda:0)");
  Result<Tensor> host = Tensor::Zeros({1}, DType::kI32);
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(device.CopyFrom(*host).code(), StatusCode::kUnavailable);
  EXPECT_EQ(host->CopyFrom(device).code(), StatusCode::kUnavailable);
}
#endif

TEST(TensorDeathTest, ProgrammingErrorsAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor t = Iota({2, 3});
  EXPECT_DEATH((void)t.data_as<int32_t>(), "data_as on a f32 tensor");
  EXPECT_DEATH((void)t.Narrow(1, 2, 2), "Narrow");
  EXPECT_DEATH((void)t.Select(0, 2), "Select");
  EXPECT_DEATH((void)t.Transpose(0, 2), "dimension 2 of a 2-d tensor");
  EXPECT_DEATH((void)Tensor().data(), "undefined");
  EXPECT_DEATH(Tensor::FromBlob(nullptr, {-1}, DType::kF32, Device::CPU(), nullptr), "bad shape");
}

}  // namespace
}  // namespace strata
