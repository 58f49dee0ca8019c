// random_tensor.h: what the trainer's op and layer tests fill their inputs with: a host f32
// tensor of normal values, the same for the same seed.
#pragma once

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

}  // namespace strata::testing
