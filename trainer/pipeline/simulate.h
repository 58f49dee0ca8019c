// simulate.h: runs every rank's action list of a schedule together on a clock, without
// communicators: checks each dependency is met before use and that nothing deadlocks, and
// gives the timeline, the bubble (idle time over the step) and the live activations per rank.
// The figures a measured run is judged against (strata-bench pipeline).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/pipeline/action.h"
#include "trainer/pipeline/schedules.h"

namespace strata::pipeline {

// Durations of one action on one stage, in any unit. `b` is a full backward (I + W); on stages
// whose index is past the end of a per-stage vector, the scalar applies.
struct Costs {
  double f = 1, b = 2, i = 1, w = 1;  // equal F, I and W: the zero-bubble paper's unit
  double comm = 0;                    // latency of a send to another rank
  // Processors the ranks share, for a pipeline whose processes outnumber the cores: 0, each rank
  // has its own (actions take their durations). > 0 (fractions allowed), processor sharing:
  // while k ranks compute, each runs at min(1, slots / k) of its speed, so a rank computing
  // while the others idle in the bubble has a core to itself. The planner's case: `cores`
  // shared by dp x tp copies of this pipeline gives slots = cores / (dp x tp).
  double slots = 0;
  std::vector<double> f_stage, b_stage, i_stage, w_stage;  // per global stage, when measured
  // Per action, when measured one by one (ActionCosts): each compute action's own duration,
  // keyed by (kind, stage, micro); an action not found takes its stage's figure.
  std::map<std::array<int, 3>, double> each;
  double F(int stage) const;
  double B(int stage) const;
  double I(int stage) const;
  double W(int stage) const;
  // The duration of compute action `a`: its own (each), else its stage's.
  double Of(const Action& a) const;
};

struct TimedAction {
  Action action;
  double start = 0, end = 0;
};

struct Simulation {
  std::vector<std::vector<TimedAction>> ranks;  // the compute actions each rank ran, in order
  double makespan = 0;                          // end of the last action
  std::vector<double> busy;                     // per rank: time computing
  // Idle time over all ranks divided by pp * makespan: the fraction of the pipeline's
  // device-time spent waiting.
  double bubble = 0;
  // Per rank: the most micro-batch stage activations alive at once (an F's saved state lives
  // until its B, or until its W when backward is split).
  std::vector<int> peak_live;
};

// Simulates all ranks of the schedule. FailedPrecondition on a deadlock (naming each rank's
// stuck action) or a list that runs an action twice or never runs one it must.
Result<Simulation> Simulate(ScheduleKind kind, const PipelineShape& shape, const Costs& costs);

// Simulate on given lists, one per rank (a hand-edited order, say, or one read back from a
// trace): `kind` says where stages live and whether backward is split. Sends and receives in
// the lists are skipped: every hand-off between ranks costs `costs.comm`. The same errors as
// Simulate, and InvalidArgument when there is not one list per rank.
Result<Simulation> SimulateActions(ScheduleKind kind, const PipelineShape& shape,
                                   const std::vector<std::vector<Action>>& rank_actions,
                                   const Costs& costs);

// The textbook bubble for equal per-stage costs: gpipe and 1f1b (p-1)/(m+p-1), interleaved
// (p-1)/(v*m+p-1); zb-h1 and zbv: what the paper's construction gives for F = I = W (state
// it in the implementation's comment).
double TextbookBubble(ScheduleKind kind, const PipelineShape& shape);

}  // namespace strata::pipeline
