// optim.h: optimizers that update parameters on their device (SGD with momentum, AdamW),
// clipping by global gradient norm, and learning-rate schedules (constant, warm-up + cosine).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "trainer/nn/module.h"

namespace strata {

struct OptimizerOptions {
  enum class Kind { kSgd, kAdamW };
  enum class Schedule { kConstant, kCosine };
  Kind kind = Kind::kAdamW;
  double lr = 1e-3;            // peak learning rate
  double momentum = 0.9;       // SGD; 0 gives plain SGD
  bool nesterov = false;       // SGD
  double beta1 = 0.9;          // AdamW
  double beta2 = 0.999;        // AdamW; 0.95 is steadier for transformers
  double eps = 1e-8;           // AdamW
  // Decoupled for AdamW, L2 for SGD. 0 by default (PyTorch's AdamW: 0.01). Only linear layers'
  // weight matrices decay: never biases, norms or embedding tables (nn::Parameter::weight_decay).
  double weight_decay = 0.0;
  double clip_norm = 0.0;      // clip the global gradient norm to this; 0 disables
  Schedule schedule = Schedule::kConstant;
  int64_t warmup_steps = 0;    // linear warm-up from 0 (both schedules)
  double min_lr_ratio = 0.1;   // cosine decays to lr * min_lr_ratio at the last step
};
void Bind(config::Binder& b, OptimizerOptions& o);

// The learning rate for `step` (0-based) of `total_steps`.
double LearningRate(const OptimizerOptions& o, int64_t step, int64_t total_steps);

// Scales every gradient so that their joint L2 norm is at most `max_norm`; returns the norm
// before clipping (synchronises on CUDA to read it). Remote parameters (updated by the servers)
// are left out, here and in Optimizer.
double ClipGradNorm(nn::ParameterRegistry& reg, double max_norm);
double GradNorm(nn::ParameterRegistry& reg);
// The pieces of ClipGradNorm for gradients spread over ranks (a pipeline's stages): the sum of
// squares of the local gradients, reduced by the caller, and the scale applied to them. With
// `split`, only tensor-parallel shards' gradients (Parameter::shard not whole), or only the
// others without: a caller sums the first over its tp group and counts the second once.
double GradSquaredSum(nn::ParameterRegistry& reg);
double GradSquaredSum(nn::ParameterRegistry& reg, bool split);
void ScaleGrads(nn::ParameterRegistry& reg, float scale);

// Updates a registry's parameters from their gradients. Not thread-safe.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  static std::unique_ptr<Optimizer> Create(const OptimizerOptions& o, nn::ParameterRegistry& reg);

  // One update with learning rate `lr`; increments step().
  virtual void Step(double lr) = 0;
  // Named state tensors (for checkpoints), e.g. "adamw.m/<param name>", each whole and shaped
  // as its parameter.
  virtual std::vector<std::pair<std::string, Tensor>> State() = 0;
  // A sharded optimizer's state is assembled for State() by GatherState() (a collective over
  // its data-parallel group: every rank calls it) and dropped again by ReleaseGatheredState();
  // after a checkpoint was loaded into State()'s tensors, StateLoaded() tells it to take its
  // shards from them. No-ops for the replicated optimizers.
  virtual Status GatherState() { return Status::OK(); }
  virtual void ReleaseGatheredState() {}
  virtual void StateLoaded() {}
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }

 protected:
  int64_t step_ = 0;
};

}  // namespace strata
