// sampling.h: choosing the next token from a row of logits: greedy (argmax, the lowest index on
// a tie) or sampled with temperature, top-k and top-p (nucleus), from a seeded draw so that
// every rank holding the same logits picks the same token.
#pragma once

#include <cstdint>

#include "trainer/train_options.h"

namespace strata {

// `logits` [vocab]. `draw`: a uniform number in [0, 1) for this (sequence, step); unused when
// greedy.
int64_t PickToken(const float* logits, int64_t vocab, const InferOptions& o, double draw);

}  // namespace strata
