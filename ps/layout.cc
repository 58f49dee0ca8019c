// layout.cc: ElasticSparseServer.
#include "ps/layout.h"

#include "common/hash.h"

namespace strata {
namespace {

// A hash of its own per server rank, independent of SparseServer's and of the other ranks'.
uint64_t RankHash(uint64_t key, uint32_t rank) { return SplitMix64(key ^ SplitMix64(0x9e3779b97f4a7c15ull * (rank + 1))); }

}  // namespace

uint32_t ElasticSparseServer(uint64_t key, uint32_t base, uint32_t servers, const std::vector<uint32_t>& left) {
  auto gone = [&](uint32_t r) { return !left.empty() && std::binary_search(left.begin(), left.end(), r); };
  uint32_t owner = SparseServer(key, base);
  if (gone(owner)) {
    // Rendezvous over the first servers still there: another leave moves only its own keys.
    uint64_t best = 0;
    owner = 0;
    for (uint32_t r = 0; r < base; ++r) {
      const uint64_t h = SplitMix64(RankHash(key, r) ^ 0x5851f42d4c957f2dull);
      if (!gone(r) && h >= best) {
        best = h;
        owner = r;
      }
    }
  }
  for (uint32_t n = base; n < servers; ++n) {
    if (gone(n)) continue;
    if (static_cast<uint32_t>((static_cast<unsigned __int128>(RankHash(key, n)) * (n + 1)) >> 64) == n) owner = n;
  }
  return owner;
}

}  // namespace strata
