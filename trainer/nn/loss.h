// loss.h: loss heads. Forward returns the mean loss and saves dL/dinput in the context;
// Backward returns it (scaled by the grad_scale given to Forward, e.g. 1/micro-batches).
#pragma once

#include "trainer/nn/module.h"

namespace strata::nn {

enum class LossKind { kMse, kCrossEntropy, kBceWithLogits };

class LossHead {
 public:
  explicit LossHead(LossKind kind) : kind_(kind) {}
  // kMse: target f32 like input; kCrossEntropy: input [..., V], target i32 [...] (< 0 ignored);
  // kBceWithLogits: input [N] or [N, 1], target f32 [N] in {0, 1}.
  double Forward(const Tensor& input, const Tensor& target, Context& ctx,
                 float grad_scale = 1.0f);
  Tensor Backward(Context& ctx);
  LossKind kind() const { return kind_; }

 private:
  LossKind kind_;
};

}  // namespace strata::nn
