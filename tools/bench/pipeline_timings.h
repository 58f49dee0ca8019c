// pipeline_timings.h: what strata-bench pipeline reads from one step's measured action timings
// beyond their means: how much one kind of action varies, the hand-off latency between ranks
// (without a common clock), and the idle time no neighbour caused.
#pragma once

#include <vector>

#include "trainer/pipeline/schedules.h"
#include "trainer/pipeline/simulate.h"

namespace strata::bench {

// How much the same action varies within a step: the coefficient of variation of the durations
// of each (kind, stage), averaged over those with at least two. On a quiet host a few percent;
// much more means the ranks were preempted (other processes, or more ranks than cores).
double ActionSpread(const std::vector<std::vector<pipeline::TimedAction>>& ranks);

// The one-way latency of a hand-off between neighbouring ranks in one step, in microseconds,
// estimated without a common clock: for each ordered pair of ranks (a, b), the least gap from
// the end of an action on a to the start of the action on b that needed its output (a
// consumer that was already waiting) is latency + (b's clock - a's clock); the offsets cancel
// in the mean of (a, b) and (b, a). Averaged over the pairs that hand off both ways; 0 if none.
double HandoffLatency(const std::vector<std::vector<pipeline::TimedAction>>& ranks);

// Idle time no neighbour caused, in microseconds: the gaps before actions whose inputs were
// all made on the same rank (an F of stage 0, a backward of the last stage, every W, the turn
// of zbv's V), which could start as soon as the action before them ended. Executor overhead and
// the OS running something else on the core; the simulator has no such time.
double UnforcedIdle(pipeline::ScheduleKind kind, const pipeline::PipelineShape& shape,
                    const std::vector<std::vector<pipeline::TimedAction>>& ranks);

}  // namespace strata::bench
