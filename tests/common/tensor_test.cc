// tensor_test.cc: DType names and bf16/fp16 conversions, Device, the host allocators, and
// Tensor construction, views, copies and printing.
#include "common/tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
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

// --- DType

TEST(DTypeTest, NumericValuesAreTheWireValues) {
  EXPECT_EQ(static_cast<int>(DType::kF32), 0);
  EXPECT_EQ(static_cast<int>(DType::kF16), 1);
  EXPECT_EQ(static_cast<int>(DType::kBF16), 2);
  EXPECT_EQ(static_cast<int>(DType::kI32), 3);
  EXPECT_EQ(static_cast<int>(DType::kI64), 4);
  EXPECT_EQ(static_cast<int>(DType::kU8), 5);
  EXPECT_TRUE(IsValidDType(5));
  EXPECT_FALSE(IsValidDType(6));
  EXPECT_FALSE(IsValidDType(0xFFFFFFFFu));
}

TEST(DTypeTest, SizesNamesAndParsing) {
  const size_t sizes[kDTypeCount] = {4, 2, 2, 4, 8, 1};
  const char* names[kDTypeCount] = {"f32", "f16", "bf16", "i32", "i64", "u8"};
  for (int i = 0; i < kDTypeCount; ++i) {
    const auto dtype = static_cast<DType>(i);
    EXPECT_EQ(DTypeSize(dtype), sizes[i]);
    EXPECT_EQ(DTypeName(dtype), names[i]);
    Result<DType> parsed = ParseDType(names[i]);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, dtype);
  }
  for (const char* bad : {"", "f64", "F32", "float", "bf16 "}) {
    Result<DType> parsed = ParseDType(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(DTypeTest, HoldsMatchesElementTypes) {
  EXPECT_TRUE(DTypeHolds<float>(DType::kF32));
  EXPECT_FALSE(DTypeHolds<float>(DType::kI32));
  EXPECT_TRUE(DTypeHolds<uint16_t>(DType::kF16));
  EXPECT_TRUE(DTypeHolds<uint16_t>(DType::kBF16));
  EXPECT_TRUE(DTypeHolds<int32_t>(DType::kI32));
  EXPECT_TRUE(DTypeHolds<int64_t>(DType::kI64));
  EXPECT_TRUE(DTypeHolds<uint8_t>(DType::kU8));
  EXPECT_FALSE(DTypeHolds<double>(DType::kF32));
}

// Every bf16 pattern survives bf16 -> float -> bf16, NaN payloads included.
TEST(DTypeTest, BF16RoundTripsEveryPattern) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    ASSERT_EQ(FloatToBF16(BF16ToFloat(h)), h) << std::hex << i;
  }
}

TEST(DTypeTest, HalfRoundTripsEveryPattern) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = HalfToFloat(h);
    ASSERT_EQ(FloatToHalf(f), h) << std::hex << i;
    const bool is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
    ASSERT_EQ(std::isnan(f), is_nan) << std::hex << i;
  }
}

TEST(DTypeTest, HalfDecodesKnownValues) {
  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xC000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(HalfToFloat(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(HalfToFloat(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(std::bit_cast<uint32_t>(HalfToFloat(0x8000)), 0x80000000u);  // -0
}

// Round to nearest, ties to even, by brute force: the nearest of all finite halves (and of
// 65536, the first power of two past them, which stands for infinity).
uint16_t ReferenceToHalf(float f) {
  if (std::isnan(f)) return 0x7E00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double x = std::fabs(static_cast<double>(f));
  // Positive halves 0x0000..0x7C00 are increasing in value; 0x7C00 (inf) counts as 65536.
  auto value = [](uint16_t h) { return h == 0x7C00 ? 65536.0 : double{HalfToFloat(h)}; };
  if (x >= 65536.0) return sign | 0x7C00;
  uint16_t lo = 0;
  uint16_t hi = 0x7C00;
  while (hi - lo > 1) {  // invariant: value(lo) <= x < value(hi)
    const auto mid = static_cast<uint16_t>((lo + hi) / 2);
    (value(mid) <= x ? lo : hi) = mid;
  }
  const double below = x - value(lo);
  const double above = value(hi) - x;
  if (below < above) return sign | lo;
  if (above < below) return sign | hi;
  return sign | ((lo & 1) ? hi : lo);
}

// The same for bf16, whose neighbours are the truncation and the next pattern up.
uint16_t ReferenceToBF16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const auto lo = static_cast<uint16_t>(bits >> 16);
  const auto hi = static_cast<uint16_t>(lo + 1);
  const double x = std::fabs(static_cast<double>(f));
  const double vlo = std::fabs(static_cast<double>(BF16ToFloat(lo)));
  const double vhi = (hi & 0x7FFF) == 0x7F80 ? std::ldexp(1.0, 128)
                                             : std::fabs(static_cast<double>(BF16ToFloat(hi)));
  const double below = x - vlo;
  const double above = vhi - x;
  if (below < above) return lo;
  if (above < below) return hi;
  return (lo & 1) ? hi : lo;
}

std::vector<float> InterestingFloats() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          0.1f,
                          1.0f / 3.0f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          65536.0f,
                          1e10f,
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::denorm_min(),
                          std::ldexp(1.0f, -24),
                          std::ldexp(1.0f, -25),
                          std::ldexp(1.5f, -25),
                          std::ldexp(1.0f, -26),
                          std::ldexp(1.0f, -14),
                          std::ldexp(1023.5f, -24),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
  // Every midpoint between neighbouring halves (exact ties, representable in float), and the
  // floats just beside each.
  for (uint16_t h = 0; h < 0x7BFF; ++h) {
    const float mid = static_cast<float>(
        (static_cast<double>(HalfToFloat(h)) + static_cast<double>(HalfToFloat(h + 1))) / 2);
    v.push_back(mid);
    v.push_back(-mid);
    v.push_back(std::nextafter(mid, 0.0f));
    v.push_back(std::nextafter(mid, 1e30f));
  }
  // Every seventh bf16 midpoint in the normal range, the same way.
  for (uint32_t b = 0x0080; b < 0x7F7F; b += 7) {
    const float mid = std::bit_cast<float>((b << 16) | 0x8000u);
    v.push_back(mid);
    v.push_back(std::nextafter(mid, 0.0f));
    v.push_back(std::nextafter(mid, 1e30f));
  }
  std::mt19937 rng(42);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (!std::isnan(f)) v.push_back(f);
  }
  return v;
}

TEST(DTypeTest, FloatToHalfRoundsToNearestEven) {
  for (float f : InterestingFloats()) {
    ASSERT_EQ(FloatToHalf(f), ReferenceToHalf(f)) << std::hexfloat << f;
  }
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // a tie between 65504 (odd) and "65536": inf
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // a tie between 0 and 2^-24: even
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalf(0.1f), 0x2E66);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
}

TEST(DTypeTest, FloatToBF16RoundsToNearestEven) {
  for (float f : InterestingFloats()) {
    ASSERT_EQ(FloatToBF16(f), ReferenceToBF16(f)) << std::hexfloat << f;
  }
  EXPECT_EQ(FloatToBF16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBF16(std::numeric_limits<float>::max()), 0x7F80);  // rounds up to inf
  EXPECT_EQ(FloatToBF16(-std::numeric_limits<float>::infinity()), 0xFF80);
}

TEST(DTypeTest, NaNStaysNaN) {
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(),
                        -std::numeric_limits<float>::quiet_NaN(),
                        std::bit_cast<float>(0x7F800001u),  // payload only in the low bits
                        std::bit_cast<float>(0xFF800001u)};
  for (float f : nans) {
    EXPECT_TRUE(std::isnan(BF16ToFloat(FloatToBF16(f))));
    EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f))));
    EXPECT_EQ(std::signbit(BF16ToFloat(FloatToBF16(f))), std::signbit(f));
    EXPECT_EQ(std::signbit(HalfToFloat(FloatToHalf(f))), std::signbit(f));
  }
}

TEST(DTypeTest, BulkConversionsMatchScalar) {
  std::vector<float> src = {0.0f, 1.0f, -2.5f, 3.14159f, 1e-6f, 70000.0f, -1e30f};
  std::vector<uint16_t> bf16(src.size());
  std::vector<uint16_t> f16(src.size());
  std::vector<float> back(src.size());
  ConvertF32ToBF16(src.data(), bf16.data(), src.size());
  ConvertF32ToF16(src.data(), f16.data(), src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(bf16[i], FloatToBF16(src[i]));
    EXPECT_EQ(f16[i], FloatToHalf(src[i]));
  }
  ConvertBF16ToF32(bf16.data(), back.data(), src.size());
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(back[i], BF16ToFloat(bf16[i]));
  ConvertF16ToF32(f16.data(), back.data(), src.size());
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(back[i], HalfToFloat(f16[i]));
  EXPECT_EQ(back[1], 1.0f);
  EXPECT_EQ(back[2], -2.5f);
}

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
