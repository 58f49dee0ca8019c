// checksum.h: Checksum64 (XXH3, 64 bits, from libxxhash) of a buffer, and Checksum64Stream for
// bytes that arrive in pieces; both give the same value for the same bytes. They detect damaged
// files (torn writes, bit rot), not tampering. A file that stores one should carry a format
// version, so that a change of checksum is refused clearly instead of read as corruption.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

struct XXH3_state_s;

namespace strata {

uint64_t Checksum64(const void* data, size_t size);

// Not thread-safe; movable, not copyable.
class Checksum64Stream {
 public:
  Checksum64Stream();
  // Adds `size` bytes at `data`.
  void Update(const void* data, size_t size);
  // Checksum64 of every byte added so far; more may be added after.
  uint64_t Digest() const;

 private:
  struct FreeState {
    void operator()(XXH3_state_s* state) const;
  };
  std::unique_ptr<XXH3_state_s, FreeState> state_;
};

}  // namespace strata
