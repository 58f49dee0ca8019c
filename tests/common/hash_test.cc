// hash_test.cc: SplitMix64 against the reference generator's published outputs; its values
// decide key placement and initial values, so they are pinned.
#include "common/hash.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(SplitMix64, MatchesTheReferenceSequence) {
  // splitmix64 seeded with 0 yields SplitMix64(0), SplitMix64(golden), SplitMix64(2 golden), ...
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(SplitMix64(kGolden), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(SplitMix64(2 * kGolden), 0x06C45D188009454Full);
}

}  // namespace
}  // namespace strata
