// checksum_test.cc: Checksum64 is XXH3-64 (pinned: files store it), and the stream gives the
// same value however the bytes are split.
#include "common/checksum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace strata {
namespace {

TEST(Checksum64, IsXxh3) {
  EXPECT_EQ(Checksum64("", 0), 0x2D06800538D394C2ull);  // XXH3_64bits of no bytes
  EXPECT_NE(Checksum64("a", 1), Checksum64("b", 1));
}

TEST(Checksum64Stream, EqualsTheOneShotChecksumForAnySplit) {
  std::string bytes;
  for (int i = 0; i < 5000; ++i) bytes.push_back(static_cast<char>(i * 131 + 7));
  const uint64_t want = Checksum64(bytes.data(), bytes.size());
  for (size_t piece : {1, 3, 64, 240, 241, 1000, 5000}) {
    Checksum64Stream stream;
    for (size_t at = 0; at < bytes.size(); at += piece) {
      stream.Update(bytes.data() + at, std::min(piece, bytes.size() - at));
    }
    EXPECT_EQ(stream.Digest(), want) << "pieces of " << piece;
  }
  Checksum64Stream empty;
  EXPECT_EQ(empty.Digest(), Checksum64("", 0));
  empty.Update(nullptr, 0);
  EXPECT_EQ(empty.Digest(), Checksum64("", 0));
}

TEST(Checksum64Stream, DigestLeavesTheStreamOpen) {
  Checksum64Stream stream;
  stream.Update("ab", 2);
  EXPECT_EQ(stream.Digest(), Checksum64("ab", 2));
  stream.Update("cd", 2);
  EXPECT_EQ(stream.Digest(), Checksum64("abcd", 4));
}

}  // namespace
}  // namespace strata
