// layout.cc: ElasticSparseServer.
#include "ps/layout.h"

#include "common/hash.h"

namespace strata {

uint32_t ElasticSparseServer(uint64_t key, uint32_t base, uint32_t servers) {
  uint32_t owner = SparseServer(key, base);
  for (uint32_t n = base; n < servers; ++n) {
    // A hash of its own per joined server, independent of SparseServer's and of the others'.
    const uint64_t h = SplitMix64(key ^ SplitMix64(0x9e3779b97f4a7c15ull * (n + 1)));
    if (static_cast<uint32_t>((static_cast<unsigned __int128>(h) * (n + 1)) >> 64) == n) owner = n;
  }
  return owner;
}

}  // namespace strata
