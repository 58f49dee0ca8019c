// models.h: the models strata-trainer trains: mlp (regression), ctr (sparse embeddings + dense
// MLP + a wide per-id term, click prediction) and gpt (byte-level transformer LM).
#pragma once

#include <memory>

#include "trainer/data.h"
#include "trainer/nn/layers.h"
#include "trainer/nn/loss.h"
#include "trainer/train_options.h"

namespace strata {

// A model with its parameters and loss head. Not thread-safe; several contexts (micro-batches)
// may be in flight, each used by one call at a time.
class Model {
 public:
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  nn::ParameterRegistry& params() { return reg_; }
  const ops::Exec& exec() const { return reg_.exec(); }

  // Copies the batch to the model's device, runs forward, the loss and backward (gradients
  // accumulate, scaled by grad_scale); returns the mean loss.
  double ForwardBackward(const Batch& batch, nn::Context& ctx, float grad_scale);
  // Forward and loss only. `output` (if non-null) receives the model output on the host:
  // mlp predictions [N, out], ctr logits [N], gpt logits [N, T, V].
  double Evaluate(const Batch& batch, nn::Context& ctx, Tensor* output);

 protected:
  Model(const ops::Exec& exec, uint64_t seed, nn::LossKind loss) : reg_(exec, seed), head_(loss) {}
  virtual Tensor Forward(const Batch& device_batch, nn::Context& ctx) = 0;
  virtual void Backward(const Tensor& dout, nn::Context& ctx) = 0;

  nn::ParameterRegistry reg_;
  nn::LossHead head_;
};

Result<std::unique_ptr<Model>> CreateModel(const ModelOptions& options, const ops::Exec& exec);

// A copy of `t` on `exec`'s device (the tensor itself when already there).
Tensor ToDevice(const Tensor& t, const ops::Exec& exec);
Tensor ToHost(const Tensor& t);

}  // namespace strata
