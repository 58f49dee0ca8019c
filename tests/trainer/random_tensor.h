// random_tensor.h: what the trainer's op and layer tests fill their inputs with: a host f32
// tensor of normal values, the same for the same seed; and how far one result is from another.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include "trainer/ops/exec.h"
#include "trainer/ops/rng.h"

namespace strata::testing {

inline Tensor RandomTensor(Shape shape, uint64_t seed, float scale = 1.0f) {
  Tensor t = ops::NewTensor(ops::Exec::Cpu(), std::move(shape));
  rng::Stream s(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = scale * static_cast<float>(s.Normal());
  return t;
}

// ||a - b|| / ||b|| over host f32 tensors of b's size, in double (||a - b|| when b is 0).
inline double RelativeError(const Tensor& a, const Tensor& b) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = a.data_as<float>()[i], y = b.data_as<float>()[i];
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

}  // namespace strata::testing
