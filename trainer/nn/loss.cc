// loss.cc: LossHead over the loss ops.
#include "trainer/nn/loss.h"

#include <cmath>

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
      loss = tp_.split() ? VocabParallelCrossEntropy(*logits, target, *g, ex, grad_scale)
                         : ops::CrossEntropy(ex, *logits, target, *g, grad_scale);
      break;
    }
    case LossKind::kBceWithLogits:
      loss = ops::BceWithLogits(ex, input, target, grad, grad_scale);
      break;
  }
  ctx.SaveActivation(this, "grad", grad);
  return loss;
}

Tensor LossHead::Backward(Context& ctx) { return ctx.Get(this, "grad"); }

double LossHead::VocabParallelCrossEntropy(const Tensor& logits, const Tensor& target,
                                           const Tensor& grad, const ops::Exec& ex,
                                           float grad_scale) const {
  const int64_t rows = logits.size(0), first = logits.size(1) * tp_.rank();
  Result<Tensor> targets = target.Reshape({rows});
  STRATA_CHECK(targets.ok()) << targets.status().ToString();
  // stats rows: 0 the max, 1 the sum of exponentials, 2 the target's logit.
  Tensor stats = ops::NewTensor(ex, {3, rows});
  Tensor max = stats.Narrow(0, 0, 1), sum_exp = stats.Narrow(0, 1, 1), tlogit = stats.Narrow(0, 2, 1);
  ops::VocabLogitStats(ex, logits, *targets, first, max, tlogit);
  TpAllReduce(tp_, max, ReduceOp::kMax, "the vocab-parallel cross-entropy (max)");
  ops::VocabSumExp(ex, logits, max, sum_exp);
  TpAllReduce(tp_, stats.Narrow(0, 1, 2), ReduceOp::kSum, "the vocab-parallel cross-entropy (sums)");
  const ops::Exec cpu = ops::Exec::Cpu();
  Tensor host = ops::NewTensor(cpu, {3, rows});
  Tensor host_targets = ops::NewTensor(cpu, {rows}, DType::kI32);
  STRATA_CHECK_OK(host.CopyFrom(stats));
  STRATA_CHECK_OK(host_targets.CopyFrom(*targets));
  const float* h = host.data_as<float>();
  const int32_t* t = host_targets.data_as<int32_t>();
  double total = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (t[r] < 0) continue;
    ++count;
    total += std::log(static_cast<double>(h[rows + r])) + h[r] - h[2 * rows + r];
  }
  const float g = count ? grad_scale / static_cast<float>(count) : 0.0f;
  ops::VocabCrossEntropyGrad(ex, logits, *targets, first, max, sum_exp, g, grad);
  return count ? total / count : 0.0;
}

}  // namespace strata::nn
