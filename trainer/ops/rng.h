// rng.h: counter-based random numbers (a splitmix64 hash of (seed, counter)) that give the same
// stream on the CPU and in CUDA kernels, in any order: dropout masks and initialisers use them
// so results do not depend on threads, devices or how work is split.
#pragma once

#include <cstdint>

#include "common/hash.h"

namespace strata::rng {

STRATA_HOST_DEVICE uint64_t Hash(uint64_t seed, uint64_t counter) {
  return SplitMix64(SplitMix64(seed) ^ counter);
}

// Uniform in [0, 1) with 24 bits (exactly representable as float).
STRATA_HOST_DEVICE float Uniform(uint64_t seed, uint64_t counter) {
  return static_cast<float>(Hash(seed, counter) >> 40) * (1.0f / 16777216.0f);
}

// Uniform in (0, 1) with 53 bits, for host-side sampling.
inline double UniformDouble(uint64_t seed, uint64_t counter) {
  return (static_cast<double>(Hash(seed, counter) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// A 64-bit seed derived from a parent seed and a name (FNV-1a of the name, mixed): parameters
// are initialised from Derive(model_seed, name), so their values depend on the name only.
inline uint64_t Derive(uint64_t seed, const char* name) {
  uint64_t h = 1469598103934665603ull;
  for (const char* p = name; *p; ++p) h = (h ^ static_cast<unsigned char>(*p)) * 1099511628211ull;
  return SplitMix64(seed ^ SplitMix64(h));
}

// A sequential generator over the same hash, for host code that draws many numbers.
class Stream {
 public:
  explicit Stream(uint64_t seed, uint64_t counter = 0) : seed_(seed), counter_(counter) {}
  uint64_t Next() { return Hash(seed_, counter_++); }
  double Uniform() { return UniformDouble(seed_, counter_++); }
  double Normal();  // Box-Muller, two draws
  uint64_t counter() const { return counter_; }

 private:
  uint64_t seed_;
  uint64_t counter_;
};

}  // namespace strata::rng
