// executor.h: StageExecutor, which runs a pipeline rank's action list (schedules.h) for one
// training step: it posts the step's receives before any compute, runs F, B, I and W
// through the rank's stages with one Context per (stage, micro-batch), sends activations and
// gradients to the neighbouring ranks over the pp Communicator without blocking (so two
// neighbours that both send at once do not deadlock), and hands finished gradients to the
// data-parallel sync through the last micro-batch's contexts (Context::GradReady), so the
// all-reduce overlaps the pipeline's tail. With pp = 1 it is the plain gradient-accumulation
// loop.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "trainer/comm/communicator.h"
#include "trainer/models/model.h"
#include "trainer/parallel/plan.h"
#include "trainer/pipeline/simulate.h"
#include "trainer/trace.h"

namespace strata::pipeline {

// What one step measured on this rank, from the executor's own clock.
struct StepTimings {
  std::vector<TimedAction> actions;  // compute actions, microseconds since the step began
  double step_us = 0;                // from the first action to the last send's completion
  double busy_us = 0;                // time in compute actions
  int64_t peak_saved_bytes = 0;      // most bytes the live contexts held at once
  int peak_live = 0;                 // most (stage, micro-batch) contexts alive at once
  double bubble() const { return step_us > 0 ? 1.0 - busy_us / step_us : 0; }
};

// Runs on the training thread; not thread-safe. `pp` may be null when pp = 1.
class StageExecutor {
 public:
  // `trainer`: this rank in the world of trainers (errors name the trainer a stage runs on).
  StageExecutor(Model& model, const ParallelPlan& plan, int trainer, Communicator* pp, Trace* trace);

  // One training step over `batches` (the replica's m micro-batches, on the host). Gradients
  // accumulate, each micro-batch's scaled by 1/m. `grad_ready` (may be empty) is set on the
  // last micro-batch's contexts; `seed_of(k)` seeds micro-batch k's context (dropout). Returns
  // the sum of the micro-batches' mean losses on the rank holding the last stage, 0 elsewhere.
  Result<double> RunStep(const std::vector<Batch>& batches, int64_t step,
                         const nn::Context::GradReadyFn& grad_ready,
                         const std::function<uint64_t(int)>& seed_of);
  // Forward only (evaluation), one batch through every stage: every rank of the pipeline calls
  // it with the same batch. On the last stage's rank returns the mean loss and (when `output`
  // is not null) the model output on the host; 0 elsewhere.
  Result<double> Forward(const Batch& batch, Tensor* output);

  const StepTimings& last_step() const { return timings_; }
  bool holds_last_stage() const;

 private:
  using Key = std::pair<int, int>;  // (stage, micro-batch)
  struct Pending {                  // a posted receive or send and its buffer
    Tensor buffer;
    std::unique_ptr<Communicator::Request> request;
    int peer_stage = -1;            // sends: the stage it goes to
  };

  bool Local(int stage) const;  // whether `stage` is on this rank
  int RankOf(int stage) const;
  std::string Describe(int stage) const;  // "stage 2 (pipeline rank 1, trainer 3)"
  uint32_t Tag(bool forward, int stage, int micro) const;
  Status PostRecv(const Action& a);
  Result<Tensor> TakeRecv(std::map<Key, Pending>& posted, Key key, const char* what);
  Status Send(const Action& a);
  Status RunCompute(const Action& a);
  Status WaitSends();
  void TrackMemory();

  Model& model_;
  const ParallelPlan& plan_;
  const int pp_rank_;
  std::vector<int> trainers_;  // the world rank of each pipeline rank
  Communicator* pp_;
  Trace* trace_;
  std::vector<int> stages_;  // global stages on this rank
  std::vector<Action> actions_;

  // The step in flight.
  const std::vector<Batch>* batches_ = nullptr;
  std::vector<Batch> device_batches_;
  int64_t step_ = 0;
  const nn::Context::GradReadyFn* grad_ready_ = nullptr;
  const std::function<uint64_t(int)>* seed_of_ = nullptr;
  double loss_ = 0;
  std::map<Key, std::unique_ptr<nn::Context>> contexts_;
  std::map<Key, Tensor> outputs_;     // F results awaiting a send or the next local stage
  std::map<Key, Tensor> input_grads_; // B/I results awaiting a send or the previous local stage
  std::map<Key, Pending> recv_f_, recv_b_;
  std::vector<Pending> sends_;
  StepTimings timings_;
  double origin_us_ = 0;
  int64_t saved_bytes_ = 0;
};

}  // namespace strata::pipeline
