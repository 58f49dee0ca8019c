// steady_millis.h: SteadyMillis, the steady clock in milliseconds, for timestamps kept in atomics.
#pragma once

#include <chrono>
#include <cstdint>

namespace strata {

inline int64_t SteadyMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace strata
