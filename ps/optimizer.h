// optimizer.h: the optimizers a server applies on push (SGD with momentum, Adagrad, Adam,
// AdamW; L2 or decoupled weight decay; per-row gradient clipping), on one record laid out as
// [value (n) | state slot 0 (n) | state slot 1 (n) | step]. ApplyUpdate is the vectorised
// kernel; ApplyUpdateReference is a plain double-precision loop the tests compare it against.
#pragma once

#include <span>

#include "ps/table.h"

namespace strata {

// Applies one step with gradient `grad` (n floats, n = RowFloats() or a short last chunk) to
// `record`. `grad_scale` multiplies the gradient first (1/W for a BSP mean). Increments the
// record's step count.
void ApplyUpdate(const OptimizerSpec& o, int state_slots, std::span<float> record, int n,
                 const float* grad, float grad_scale);
void ApplyUpdateReference(const OptimizerSpec& o, int state_slots, std::span<float> record, int n,
                          const float* grad, float grad_scale);

}  // namespace strata
