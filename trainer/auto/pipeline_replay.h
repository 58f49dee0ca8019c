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

#include <memory>
#include <vector>

#include "cluster/inproc_cluster.h"
#include "common/status.h"
#include "trainer/comm/communicator.h"
#include "trainer/pipeline/schedules.h"
#include "trainer/pipeline/simulate.h"

namespace strata {

// One pipeline step as the replay runs it. `compute`'s F, B, I and W per stage are CPU seconds
// (spun on the thread's own CPU clock, so a preempted spin still does all its work); `f_wait`
// and `b_wait` per stage are time a compute action spends blocked beside it (a tensor-parallel
// collective), slept, not spun (I takes b_wait, W none); `boundary_bytes[s]` is what stage s
// sends on (its output; the gradient back is the same size).
struct PipelineStepCosts {
  pipeline::Costs compute;
  std::vector<double> f_wait, b_wait;
  std::vector<int64_t> boundary_bytes;
  // After the pipeline, as the trainer's step: this many all-reduces of one double over it (the
  // loss, the gradient norm), then `optimizer_s` of CPU time on every rank.
  int scalar_all_reduces = 0;
  double optimizer_s = 0;
};

// What the planner asks the replay to measure for a plan: `copies` pipelines of shape.pp ranks.
struct PipelineReplayRequest {
  pipeline::ScheduleKind kind = pipeline::ScheduleKind::k1F1B;
  pipeline::PipelineShape shape;
  PipelineStepCosts costs;
  int copies = 1;
  double simulated_s = 0;  // the simulator's makespan for the same costs (processor sharing)
};

class PipelineReplay {
 public:
  // `copies` pipelines of `pp` ranks (copies x pp threads, all at once: the job's dp x tp
  // pipelines share the cores the same way), over in-process nodes; `shm_ring_bytes` as
  // GlooOptions' (0: TCP). The communicators stay up for every Measure.
  static Result<std::unique_ptr<PipelineReplay>> Start(int pp, int copies, uint64_t shm_ring_bytes);
  ~PipelineReplay();

  // Seconds a step of `kind` on `shape` (shape.pp must be Start's): one step to warm up, then
  // every thread released together runs `reps` steps back to back (each: the pipeline, the
  // scalar all-reduces, the optimizer); the mean over them, to the last thread's end.
  Result<double> Measure(pipeline::ScheduleKind kind, const pipeline::PipelineShape& shape,
                         const PipelineStepCosts& step, int reps);

  int pp() const { return pp_; }
  int copies() const { return copies_; }

 private:
  PipelineReplay(int pp, int copies) : pp_(pp), copies_(copies) {}
  const int pp_, copies_;
  std::unique_ptr<InprocCluster> cluster_;
  std::vector<std::unique_ptr<Communicator>> comms_;  // copy c, rank r at c * pp + r
};

// Measures every request (grouped by pipeline and copies: one set of communicators each), its
// repetitions sized to about `budget_s` of replay each (1 to 7). Results in request order.
Result<std::vector<double>> ReplayPipelines(const std::vector<PipelineReplayRequest>& requests, uint64_t shm_ring_bytes,
                                            double budget_s = 0.25);

}  // namespace strata
