// pipeline_replay.h: PipelineReplay, a plan's pipeline schedule run for real on this host's
// cores: every rank of every copy of the pipeline a thread, each compute action a spin of its
// measured CPU time, each hand-off a real send of the stage boundary's bytes through the
// communicator a job's pipeline uses (shared memory on one host).
//
// Why: the schedule simulator shares the cores among the ranks computing at each moment
// (processor sharing). A host whose trainer processes outnumber its cores does not: its
// scheduler runs a woken rank when a slice allows, so a rank handing an activation on can sit
// preempted for a millisecond while the ranks it feeds wake, find nothing and sleep again
// (measured on the 2-core host, docs/auto_parallel.md: a pp 4 gpipe step of 0.1 ms actions
// took 17 ms where processor sharing gives 8.6). The replay measures what the simulator
// cannot: the planner uses it for pipelines whose ranks outnumber the cores.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cluster/inproc_cluster.h"
#include "common/status.h"
#include "trainer/comm/communicator.h"
#include "trainer/pipeline/schedules.h"
#include "trainer/pipeline/simulate.h"

namespace strata {

// What one replayed rank computes for real in place of the spins: the planner's UnitReplayWork
// (unit_replay.h) runs the model's own units on a sample micro-batch. Made on the rank's thread
// (its allocator, its caches), used by that thread only.
class ReplayWork {
 public:
  virtual ~ReplayWork() = default;
  // Each fails only when the device runs out of memory (ResourceExhausted).
  virtual Status Forward(int stage, int micro) = 0;
  // `full`: the fused backward (kBackward); otherwise its input half (kBackwardInput).
  virtual Status Backward(int stage, int micro, bool full) = 0;
  virtual Status BackwardWeight(int stage, int micro) = 0;
  // What the trainer's step does after its gradients are synchronised: the gradient norm's
  // pass and the optimizer's update (then gradients zeroed, as the next step starts).
  virtual Status Update() = 0;
};
// One rank's work, by its pipeline rank (0 .. pp-1) and its tensor-parallel group's communicator
// (null for tp 1: the model's collectives run on it, as the trainer's do); called on the thread
// that runs it.
using ReplayWorkFactory = std::function<Result<std::unique_ptr<ReplayWork>>(int pp_rank, Communicator* tp)>;

// One pipeline step as the replay runs it. `compute`'s F, B, I and W per stage are CPU seconds
// (spun on the thread's own CPU clock, so a preempted spin still does all its work) unless a
// ReplayWork runs the stage's real compute in their place; `f_wait`
// and `b_wait` per stage are time a compute action spends blocked beside it (a tensor-parallel
// collective), slept, not spun (I takes b_wait, W none); `boundary_bytes[s]` is what stage s
// sends on (its output; the gradient back is the same size).
struct PipelineStepCosts {
  pipeline::Costs compute;
  std::vector<double> f_wait, b_wait;
  std::vector<int64_t> boundary_bytes;
  // After the pipeline, as the trainer's step:
  // - the data-parallel gradient sync of `grad_bytes[r]` (per pipeline rank; 0 or dp 1: none):
  //   an all-reduce, or with `zero` 1 or 2 a reduce-scatter (and the all-gather after the
  //   optimizer);
  // - one-double all-reduces in the order of `scalars`, a group each ('p': the pipeline, 'd':
  //   data-parallel, 't': tensor-parallel; the trainer: the loss over p then d, the gradient
  //   norm over t then p);
  // - `optimizer_s` of CPU time on every rank, or with a ReplayWork and `zero` 0 its Update.
  std::vector<int64_t> grad_bytes;
  int zero = 0;
  std::string scalars;
  double optimizer_s = 0;
};

// What the planner asks the replay to measure for a plan: dp x tp pipelines of shape.pp ranks
// (the tp copies of a stage run side by side: with `work`, its model's collectives over their tp
// group; with spins, slept as `f_wait` and `b_wait`).
struct PipelineReplayRequest {
  pipeline::ScheduleKind kind = pipeline::ScheduleKind::k1F1B;
  pipeline::PipelineShape shape;
  PipelineStepCosts costs;
  int dp = 1, tp = 1;
  double simulated_s = 0;  // the simulator's makespan for the same costs (processor sharing)
  ReplayWorkFactory work;  // empty: spins of `costs.compute`
};

class PipelineReplay {
 public:
  // dp x tp pipelines of `pp` ranks (dp x tp x pp threads, all at once: the job's pipelines
  // share the cores the same way), over in-process nodes, with a communicator per pipeline, one
  // per data-parallel group (the pipelines of one tp index, rank by rank) and one per
  // tensor-parallel group (the tp copies of a pipeline rank); `shm_ring_bytes` as GlooOptions'
  // (0: TCP). The communicators stay up for every Measure.
  static Result<std::unique_ptr<PipelineReplay>> Start(int pp, int dp, int tp, uint64_t shm_ring_bytes);
  ~PipelineReplay();

  // Seconds a step of `kind` on `shape` (shape.pp must be Start's): one step to warm up, then
  // every thread released together runs `reps` steps back to back (each: the pipeline, then the
  // tail PipelineStepCosts lists); each step from the slowest thread's end of the one before to
  // its end of this one, the median over the steps. With `work`, each thread makes its rank's
  // ReplayWork first and runs it in place of the compute spins.
  Result<double> Measure(pipeline::ScheduleKind kind, const pipeline::PipelineShape& shape,
                         const PipelineStepCosts& step, int reps, const ReplayWorkFactory& work = {});

  int pp() const { return pp_; }

 private:
  PipelineReplay(int pp, int dp, int tp) : pp_(pp), dp_(dp), tp_(tp) {}
  const int pp_, dp_, tp_;
  std::unique_ptr<InprocCluster> cluster_;
  // Thread t = (d * tp + k) * pp + r: its pipeline's communicator, its dp group's and its tp
  // group's.
  std::vector<std::unique_ptr<Communicator>> pp_comms_, dp_comms_, tp_comms_;
};

// Seconds of steps each group of a ReplayPipelines pass runs first, unmeasured.
constexpr double kReplayWarmupS = 0.5;

// Measures every request (grouped by shape: one set of communicators each) in `passes` passes
// over all of them, every other pass in the reverse order, each of a request's passes sized to
// about budget_s / passes of replay (2 to 15 steps); a request's figure is the median of its
// passes. Why passes: this host's speed drifts by 10-30% over seconds, and a plan measured in
// one window of a fraction of a second carries that window's drift (a dp 2 x pp 2 plan
// replayed at 11.0 ms in one planner run and 14.9 ms in another; its job ran 17 ms). Each
// group's pass starts with kReplayWarmupS of its first request, not measured. Results in
// request order.
Result<std::vector<double>> ReplayPipelines(const std::vector<PipelineReplayRequest>& requests, uint64_t shm_ring_bytes,
                                            double budget_s = 0.3, int passes = 3);

}  // namespace strata
