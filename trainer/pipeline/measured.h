// measured.h: a pipeline step's measured timeline across ranks: gathered on one rank, written
// as a Chrome trace (one row per pipeline rank) and drawn beside the plan the simulator makes
// from the same step's measured F/B/I/W costs, so a bubble can be seen, not just computed.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/comm/communicator.h"
#include "trainer/pipeline/simulate.h"

namespace strata::pipeline {

// Every pipeline rank calls it with its last step's compute actions (StepTimings::actions);
// `pp` may be null (one rank). Returns all ranks' actions, by pipeline rank, on every rank.
Result<std::vector<std::vector<TimedAction>>> GatherTimelines(Communicator* pp,
                                                              const std::vector<TimedAction>& mine);

// Mean measured duration of each kind of action on each stage (the simulator's input).
Costs MeasuredCosts(const std::vector<std::vector<TimedAction>>& ranks, int num_stages);
// MeasuredCosts, and each compute action's own measured duration (Costs::each): the simulator
// then runs the step with the durations it really had, so what the measured timeline adds is
// the executor's (waits, hand-offs, time the OS took), not the actions' spread about their mean.
Costs ActionCosts(const std::vector<std::vector<TimedAction>>& ranks, int num_stages);

// {"traceEvents": [...]}: pid = pipeline rank, one "X" event per action, named as the action.
std::string ChromeTrace(const std::vector<std::vector<TimedAction>>& ranks);

// Writes <base>.json (ChromeTrace) and <base>.svg: the simulator's plan for `kind` and `shape`
// with the measured costs above the measured timeline.
Status WritePipelineTimeline(const std::string& base, ScheduleKind kind, const PipelineShape& shape,
                             const std::vector<std::vector<TimedAction>>& ranks, int64_t step);

}  // namespace strata::pipeline
