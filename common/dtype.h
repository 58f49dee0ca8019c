// dtype.h: element types (DType: sizes, names, parsing), host float <-> bf16/fp16
// conversions, and Device (where a tensor's bytes live: "cpu", "cuda:1").
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <type_traits>

#include "common/status.h"

namespace strata {

// The numeric values are fixed: the wire schema carries them.
enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2, kI32 = 3, kI64 = 4, kU8 = 5 };
inline constexpr int kDTypeCount = 6;

// True if `raw` (for example a dtype field read off the wire) names a DType.
inline constexpr bool IsValidDType(uint32_t raw) { return raw < kDTypeCount; }

size_t DTypeSize(DType dtype);                    // bytes per element
std::string_view DTypeName(DType dtype);          // "f32", "f16", "bf16", "i32", "i64", "u8"
Result<DType> ParseDType(std::string_view name);  // the inverse of DTypeName
std::ostream& operator<<(std::ostream& os, DType dtype);

// True if elements of `dtype` may be accessed as T. f16 and bf16 have no C++ type on the host,
// so both are accessed as their uint16_t bit patterns (convert with the functions below).
template <typename T>
constexpr bool DTypeHolds(DType dtype) {
  if constexpr (std::is_same_v<T, float>) return dtype == DType::kF32;
  if constexpr (std::is_same_v<T, uint16_t>) return dtype == DType::kF16 || dtype == DType::kBF16;
  if constexpr (std::is_same_v<T, int32_t>) return dtype == DType::kI32;
  if constexpr (std::is_same_v<T, int64_t>) return dtype == DType::kI64;
  if constexpr (std::is_same_v<T, uint8_t>) return dtype == DType::kU8;
  return false;
}

// --- Host conversions. Round to nearest, ties to even; NaN stays NaN (sign and the high
// payload bits are kept, so every 16-bit pattern survives a round trip through float).

// bfloat16 is the top half of a float32.
inline uint16_t FloatToBF16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: truncate, but never to the inf pattern
    uint16_t h = static_cast<uint16_t>(bits >> 16);
    return (h & 0x7F) ? h : static_cast<uint16_t>(h | 0x40);
  }
  // Adding 0x7FFF (+1 when the kept lsb is odd) carries into the kept half exactly when the
  // dropped half is above the midpoint (or at it with an odd lsb). Overflow yields inf.
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float BF16ToFloat(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

// IEEE 754 binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; max finite 65504.
inline uint16_t FloatToHalf(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf or NaN
    if (abs == 0x7F800000u) return sign | 0x7C00u;
    uint16_t payload = static_cast<uint16_t>((abs >> 13) & 0x3FFu);
    return sign | 0x7C00u | (payload ? payload : 0x200u);
  }
  // 65520 = 65504 + half an ulp: from here up, RNE rounds to a value that only inf can hold.
  if (abs >= 0x477FF000u) return sign | 0x7C00u;
  if (abs >= 0x38800000u) {  // >= 2^-14: a normal half
    // Rebias the exponent (127 -> 15, i.e. subtract 112 << 23) and round the 13 dropped bits;
    // a mantissa carry correctly bumps the exponent.
    abs += 0xC8000FFFu + ((abs >> 13) & 1u);
    return sign | static_cast<uint16_t>(abs >> 13);
  }
  if (abs < 0x33000000u) return sign;  // <= 2^-25 (half the smallest subnormal): zero
  // A subnormal half counts units of 2^-24. Shift the 24-bit significand into that unit and
  // round what falls off; rounding up from 0x3FF gives 0x400, the smallest normal, as it should.
  const uint32_t exponent = abs >> 23;  // 102..112
  const uint32_t significand = (abs & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - exponent;  // 14..24
  uint32_t h = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Bulk forms of the above (n elements; the ranges must not overlap).
void ConvertF32ToBF16(const float* src, uint16_t* dst, size_t n);
void ConvertBF16ToF32(const uint16_t* src, float* dst, size_t n);
void ConvertF32ToF16(const float* src, uint16_t* dst, size_t n);
void ConvertF16ToF32(const uint16_t* src, float* dst, size_t n);

// --- Device: where a tensor's bytes live. A value type.
struct Device {
  enum class Type : uint8_t { kCPU = 0, kCUDA = 1 };
  Type type = Type::kCPU;
  int index = 0;  // the CUDA ordinal; always 0 for the CPU

  static constexpr Device CPU() { return Device{}; }
  static constexpr Device CUDA(int index) { return Device{Type::kCUDA, index}; }
  bool is_cpu() const { return type == Type::kCPU; }
  bool is_cuda() const { return type == Type::kCUDA; }
  std::string ToString() const;  // "cpu", "cuda:1"
  friend bool operator==(const Device&, const Device&) = default;
};

// Accepts "cpu", "cuda" (device 0) and "cuda:N".
Result<Device> ParseDevice(std::string_view text);
std::ostream& operator<<(std::ostream& os, const Device& device);

}  // namespace strata
