// dtype.cc: DType names and sizes, bulk bf16/fp16 conversions, Device parsing and printing.
#include "common/dtype.h"

#include <charconv>
#include <ostream>

#include "common/check.h"

namespace strata {

namespace {

struct DTypeInfo {
  std::string_view name;
  size_t size;
};

// Indexed by the DType's numeric value.
constexpr DTypeInfo kDTypeInfo[kDTypeCount] = {
    {"f32", 4}, {"f16", 2}, {"bf16", 2}, {"i32", 4}, {"i64", 8}, {"u8", 1},
};

const DTypeInfo& Info(DType dtype) {
  const auto raw = static_cast<uint32_t>(dtype);
  STRATA_CHECK(IsValidDType(raw)) << "bad DType value " << raw;
  return kDTypeInfo[raw];
}

}  // namespace

size_t DTypeSize(DType dtype) { return Info(dtype).size; }

std::string_view DTypeName(DType dtype) { return Info(dtype).name; }

Result<DType> ParseDType(std::string_view name) {
  for (int i = 0; i < kDTypeCount; ++i) {
    if (kDTypeInfo[i].name == name) return static_cast<DType>(i);
  }
  return Status::InvalidArgument("unknown dtype '" + std::string(name) +
                                 "' (expected f32, f16, bf16, i32, i64 or u8)");
}

std::ostream& operator<<(std::ostream& os, DType dtype) {
  if (!IsValidDType(static_cast<uint32_t>(dtype))) {
    return os << "DType(" << static_cast<uint32_t>(dtype) << ")";
  }
  return os << DTypeName(dtype);
}

void ConvertF32ToBF16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = FloatToBF16(src[i]);
}

void ConvertBF16ToF32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = BF16ToFloat(src[i]);
}

void ConvertF32ToF16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = FloatToHalf(src[i]);
}

void ConvertF16ToF32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = HalfToFloat(src[i]);
}

std::string Device::ToString() const {
  if (is_cpu()) return "cpu";
  return "cuda:" + std::to_string(index);
}

Result<Device> ParseDevice(std::string_view text) {
  if (text == "cpu") return Device::CPU();
  if (text == "cuda") return Device::CUDA(0);
  constexpr std::string_view kPrefix = "cuda:";
  if (text.starts_with(kPrefix)) {
    std::string_view digits = text.substr(kPrefix.size());
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() &&
        index >= 0) {
      return Device::CUDA(index);
    }
  }
  return Status::InvalidArgument("bad device '" + std::string(text) +
                                 "' (expected cpu, cuda or cuda:N)");
}

std::ostream& operator<<(std::ostream& os, const Device& device) { return os << device.ToString(); }

}  // namespace strata
