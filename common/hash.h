// hash.h: SplitMix64, the 64-bit mixing function behind key partitioning (ps/table.h), the
// servers' initialisers and the trainer's counter-based random numbers (trainer/ops/rng.h).
// Usable in CUDA kernels too, so host and device draw the same numbers.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define STRATA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define STRATA_HOST_DEVICE inline
#endif

namespace strata {

// Steele, Lea and Flood's splitmix64 finaliser (the increment included): a bijection on 64-bit
// values whose every output bit depends on every input bit. Its values are part of what strata
// computes (which server holds a key, every initial value), so it must never change.
STRATA_HOST_DEVICE uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace strata
