// trainer_memory.cc: Trainer::LogMemory, what a rank holds for training (parameters, gradients,
// optimizer state) beside the arithmetic of ZeRO's paper for fp32 AdamW.
#include <nlohmann/json.hpp>

#include "common/logging.h"
#include "trainer/grad_sync.h"
#include "trainer/ps_sync.h"
#include "trainer/progress.h"
#include "trainer/sharded_optim.h"
#include "trainer/trainer.h"
#include "trainer/zero3.h"

namespace strata {

void Trainer::LogMemory(int64_t step_peak) {
  // Bytes counted from the tensors this rank holds (buffers with their padding), after the
  // second step (the first when only one runs), when every buffer exists. psi: this rank's parameters (its (pp, tp) shard).
  const nn::ParameterRegistry& reg = model_->params();
  int64_t psi = 0, params = 0, grads_step = 0;
  for (const auto& p : reg.params()) {
    const int64_t n = *ShapeNumel(p->shard.LocalShape());  // values may be released (ZeRO-3)
    psi += n;
    params += n * static_cast<int64_t>(sizeof(float));
    grads_step += n * static_cast<int64_t>(sizeof(float));
  }
  int64_t grads_between = grads_step, state = 0;
  if (reducer_) {
    GradBuckets& b = reducer_->buckets();
    if (b.holds_values()) params = b.value_bytes();
    // The full buffers (made again at a step's start under ZeRO-2) and the reduced shards.
    int64_t full = 0;
    for (size_t i = 0; i < b.size(); ++i) full += b[i].padded * static_cast<int64_t>(sizeof(float));
    grads_step = full + reducer_->grad_shard_bytes();
    grads_between = (b.grads_allocated() ? full : 0) + reducer_->grad_shard_bytes();
  }
  if (zero3_) {
    // Shards only between steps. During a step a unit's full values exist while it computes
    // and its full gradients from its first backward until reduced (all of them at once, at
    // worst, when micro-batches accumulate): the peak line below says what it came to.
    GradBuckets& b = zero3_->buckets();
    params = zero3_->value_shard_bytes();
    int64_t full = 0;
    for (size_t i = 0; i < b.size(); ++i) full += b[i].padded * static_cast<int64_t>(sizeof(float));
    grads_step = full + zero3_->grad_shard_bytes();
    grads_between = zero3_->grad_shard_bytes();
  }
  if (sharded_) {
    state = sharded_->state_bytes();
  } else {
    for (auto& [name, t] : optimizer_->State()) state += static_cast<int64_t>(t.nbytes());
  }
  // offload: the servers hold the masters and the optimizer state; the delayed update keeps a
  // second copy of the weights (the next step's, arriving), and its prediction a third (the
  // last pull).
  const bool offload = job_.sync.mode == SyncOptions::Mode::kOffload;
  const int64_t staging = offload && ps_ ? ps_->staging_bytes() : 0;
  params += staging;
  // sync.wire bf16: the working weights held in bf16 between uses (a unit's fp32 values only
  // while it computes: the peak line counts them).
  const int64_t bf16_floats = offload && ps_ ? ps_->bf16_weight_floats() : 0;
  params -= bf16_floats * static_cast<int64_t>(sizeof(float) - sizeof(uint16_t));
  if (offload && ps_) {
    // A unit's gradients exist from its backward until the servers acknowledged their push: the
    // ones held now (after the step: outside the units, the compact sparse tables') and, during
    // a step, the most the units' gradients and the pushes' copies came to at once.
    grads_between = 0;
    for (const auto& p : reg.params()) grads_between += p->grad.defined() ? static_cast<int64_t>(p->grad.nbytes()) : 0;
    grads_step = grads_between + ps_->grad_peak_bytes();
  }
  const int zero = sharded_ ? job_.parallel.zero : 0;
  // ZeRO shards over the dp x cp ranks averaging each gradient.
  const double n = plan_.dp * plan_.cp, per = psi > 0 ? static_cast<double>(psi) : 1.0;
  // The paper's fp32 AdamW (K = 8: the parameters are the master copy) per parameter.
  const bool adam = job_.optimizer.kind == OptimizerOptions::Kind::kAdamW;
  const double k = adam ? 8 : 4;
  double formula = zero == 0 ? 8 + k : zero == 1 ? 8 + k / n : zero == 2 ? 4 + (4 + k) / n : (8 + k) / n;
  // offload: the weights and the delayed update's copies of them (the pulls arriving; the last
  // pull, for the prediction), in 4 bytes or (sync.wire bf16) 2; no gradients between steps.
  if (offload) {
    const int copies = job_.sync.delayed_update ? (job_.sync.delayed_predict ? 3 : 2) : 1;
    formula = copies * (bf16_floats > 0 ? 2 : 4);
  }
  const auto mib = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
  const std::string who = "rank " + std::to_string(rank_) + " memory (" +
                          (offload ? std::string("offload") : "ZeRO-" + std::to_string(zero)) + ", dp " +
                          std::to_string(plan_.dp) + (plan_.cp > 1 ? " x cp " + std::to_string(plan_.cp) : "") + ", psi " + std::to_string(psi) + " parameters): ";
  spdlog::info("{}parameters {:.3f} MiB ({:.2f} psi)", who, mib(params), params / per);
  spdlog::info("{}gradients {:.3f} MiB during a step ({:.2f} psi), {:.3f} MiB between steps ({:.2f} psi)", who,
               mib(grads_step), grads_step / per, mib(grads_between), grads_between / per);
  if (offload && ps_) {
    spdlog::info("{}of the gradients, a unit's exist from its backward until the servers acknowledged their push: "
                 "{:.3f} MiB at most at once{}", who, mib(ps_->grad_peak_bytes()),
                 job_.sync.wire == DType::kBF16 ? " (the pushes' bf16 copies included)" : "");
  }
  spdlog::info("{}optimizer state {:.3f} MiB ({:.2f} psi){}", who, mib(state), state / per,
               offload ? ", the masters and the optimizer state on the servers" : "");
  if (bf16_floats > 0) {
    spdlog::info("{}of the parameters, {:.3f} MiB are the working weights held in bf16 (sync.wire bf16)", who,
                 mib(bf16_floats * static_cast<int64_t>(sizeof(uint16_t))));
  }
  if (staging > 0) spdlog::info("{}of the parameters, {:.3f} MiB receive the delayed update's pulls{}", who, mib(staging),
                                job_.sync.delayed_update && job_.sync.delayed_predict ? " or keep the last one (the prediction)" : "");
  spdlog::info("{}total {:.2f} psi between steps, {:.2f} psi during a step; the seeds' fp32 {} arithmetic: {:.2f} psi",
               who, (params + grads_between + state) / per, (params + grads_step + state) / per,
               adam ? "Adam" : "SGD-momentum", formula);
  // The allocator serves everything of the process on this device (activations, data, the
  // model), not only the three kinds above.
  spdlog::info("{}peak during a step {:.3f} MiB ({:.2f} psi), allocator's high-water mark, activations included; "
               "activations saved for backward at most {:.3f} MiB (in {}; matmuls in {})",
               who, mib(step_peak), step_peak / per, mib(pipeline_.peak_saved_bytes),
               DTypeName(job_.train.Saved()), ops::MatmulPrecisionName(job_.train.Matmul()));
  progress_->Metrics(nlohmann::json{{"step", step_},
                                    {"memory", {{"rank", rank_}, {"zero", zero}, {"dp", plan_.dp}, {"psi", psi},
                                                {"param_bytes", params}, {"grad_bytes_step", grads_step},
                                                {"grad_bytes_between", grads_between}, {"state_bytes", state},
                                                {"offload", offload}, {"staging_bytes", staging},
                                                {"bf16_weight_bytes", bf16_floats * 2},
                                                {"formula_bytes_per_param", formula},
                                                {"step_peak_bytes", step_peak}, {"cp", plan_.cp},
                                                {"saved_activation_bytes", pipeline_.peak_saved_bytes},
                                                {"saved_dtype", DTypeName(job_.train.Saved())},
                                                {"matmul_precision", ops::MatmulPrecisionName(job_.train.Matmul())}}}}
                         .dump());
}

}  // namespace strata
