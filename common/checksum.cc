// checksum.cc: Checksum64 and Checksum64Stream over libxxhash's XXH3.
#include "common/checksum.h"

#include <xxhash.h>

#include "common/check.h"

namespace strata {

uint64_t Checksum64(const void* data, size_t size) { return XXH3_64bits(data, size); }

void Checksum64Stream::FreeState::operator()(XXH3_state_s* state) const { XXH3_freeState(state); }

Checksum64Stream::Checksum64Stream() : state_(XXH3_createState()) {
  STRATA_CHECK(state_ != nullptr);
  STRATA_CHECK(XXH3_64bits_reset(state_.get()) == XXH_OK);
}

void Checksum64Stream::Update(const void* data, size_t size) {
  STRATA_CHECK(XXH3_64bits_update(state_.get(), data, size) == XXH_OK);
}

uint64_t Checksum64Stream::Digest() const { return XXH3_64bits_digest(state_.get()); }

}  // namespace strata
