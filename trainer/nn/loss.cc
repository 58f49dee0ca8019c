// loss.cc: LossHead over the loss ops.
#include "trainer/nn/loss.h"

#include "trainer/ops/ops.h"

namespace strata::nn {

double LossHead::Forward(const Tensor& input, const Tensor& target, Context& ctx,
                         float grad_scale) {
  const ops::Exec& ex = ctx.exec();
  Tensor grad = ops::NewTensor(ex, input.shape());
  double loss = 0;
  switch (kind_) {
    case LossKind::kMse:
      loss = ops::Mse(ex, input, target, grad, grad_scale);
      break;
    case LossKind::kCrossEntropy: {
      Result<Tensor> logits = input.Reshape({-1, input.size(input.dim() - 1)});
      Result<Tensor> g = grad.Reshape({-1, input.size(input.dim() - 1)});
      STRATA_CHECK(logits.ok() && g.ok()) << "cross-entropy input must be contiguous";
      loss = ops::CrossEntropy(ex, *logits, target, *g, grad_scale);
      break;
    }
    case LossKind::kBceWithLogits:
      loss = ops::BceWithLogits(ex, input, target, grad, grad_scale);
      break;
  }
  ctx.Save(this, "grad", grad);
  return loss;
}

Tensor LossHead::Backward(Context& ctx) { return ctx.Get(this, "grad"); }

}  // namespace strata::nn
