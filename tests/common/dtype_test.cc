// dtype_test.cc: DType's wire values, sizes, names and parsing, and the bf16 and fp16
// conversions (every pattern round-trips, rounding to nearest even, NaN kept, bulk = scalar).
#include "common/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <ios>
#include <limits>
#include <random>
#include <vector>

namespace strata {
namespace {

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

}  // namespace
}  // namespace strata
