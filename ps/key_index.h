// key_index.h: KeyIndex, the client's per-call map from a sparse key to its position among the
// call's distinct keys: open addressing in two flat arrays sized once for the call, so merging
// duplicate keys allocates nothing per key (a node-based map allocates on every insert).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "common/hash.h"

namespace strata {

// Not thread-safe; one call's keys.
class KeyIndex {
 public:
  // Room for up to `keys` distinct keys at a load of at most 1/2.
  explicit KeyIndex(size_t keys)
      : mask_(std::bit_ceil(std::max<size_t>(2 * keys, 16)) - 1), keys_(mask_ + 1), slots_(mask_ + 1, kEmpty) {}

  // The position of `key`; if absent, records `fresh` as its position and sets *inserted.
  uint32_t FindOrInsert(uint64_t key, uint32_t fresh, bool* inserted) {
    for (size_t h = SplitMix64(key) & mask_;; h = (h + 1) & mask_) {
      if (slots_[h] == kEmpty) {
        keys_[h] = key;
        slots_[h] = fresh;
        *inserted = true;
        return fresh;
      }
      if (keys_[h] == key) {
        *inserted = false;
        return slots_[h];
      }
    }
  }

 private:
  static constexpr uint32_t kEmpty = 0xffffffffu;
  const size_t mask_;
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> slots_;
};

}  // namespace strata
