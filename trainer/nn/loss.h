// loss.h: loss heads. Forward returns the mean loss and saves dL/dinput in the context;
// Backward returns it (scaled by the grad_scale given to Forward, e.g. 1/micro-batches).
#pragma once

#include "trainer/nn/module.h"
#include "trainer/nn/tp_group.h"

namespace strata::nn {

enum class LossKind { kMse, kCrossEntropy, kBceWithLogits };

// With a split TpGroup, cross-entropy is vocab-parallel: the input is this rank's slice of the
// logits (columns [r V/tp, (r+1) V/tp)); each row's max, sum of exponentials and target logit
// are all-reduced (3 floats a row), and every rank returns the same loss and the gradient of
// its slice. The full logits never exist on one rank.
class LossHead {
 public:
  explicit LossHead(LossKind kind, TpGroup tp = {}) : kind_(kind), tp_(tp) {}
  // kMse: target f32 like input; kCrossEntropy: input [..., V], target i32 [...] (< 0 ignored);
  // kBceWithLogits: input [N] or [N, 1], target f32 [N] in {0, 1}.
  double Forward(const Tensor& input, const Tensor& target, Context& ctx,
                 float grad_scale = 1.0f);
  Tensor Backward(Context& ctx);
  LossKind kind() const { return kind_; }

 private:
  double VocabParallelCrossEntropy(const Tensor& logits, const Tensor& target, const Tensor& grad,
                                   const ops::Exec& ex, float grad_scale) const;

  LossKind kind_;
  TpGroup tp_;
};

}  // namespace strata::nn
