// png_check.h: PngSize, the check that a file is a PNG (signature and IHDR), for the tests of
// train.plot_path.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace strata::testing {

// A PNG's width and height from its IHDR; false (and why in *error) unless the file starts with
// the 8-byte PNG signature followed by a 13-byte IHDR chunk.
inline bool PngSize(const std::string& path, uint32_t* width, uint32_t* height, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string bytes = buf.str();
  static const unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() < 33) {
    *error = path + ": " + std::to_string(bytes.size()) + " bytes, too short for a PNG";
    return false;
  }
  if (std::memcmp(bytes.data(), kSignature, 8) != 0) {
    *error = path + ": no PNG signature";
    return false;
  }
  auto be32 = [&](size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<unsigned char>(bytes[at + i]);
    return v;
  };
  if (be32(8) != 13 || bytes.compare(12, 4, "IHDR") != 0) {
    *error = path + ": the first chunk is not a 13-byte IHDR";
    return false;
  }
  *width = be32(16);
  *height = be32(20);
  return true;
}

}  // namespace strata::testing
