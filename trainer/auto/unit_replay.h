// unit_replay.h: UnitReplayWork, the planner's pipeline replay (pipeline_replay.h) with the
// model's own compute: each replayed rank builds its stages' units, as the trainer would for the
// plan, and runs their real forward, backward and optimizer on a sample micro-batch.
//
// Why not spins of the calibrated times: on a host whose trainers outnumber its cores, the real
// compute costs more CPU than the sum of its calibrated parts (measured on the 2-core host, a
// pp 4 gpipe m 16 gpt step used 21 ms of CPU against 14.5 ms calibrated: allocations, caches
// another rank's kernels cooled between time slices, the loss head's per-micro-batch work). A
// spin pays none of that, so the replay came out a quarter fast (docs/auto_parallel.md).
#pragma once

#include "common/status.h"
#include "trainer/auto/pipeline_replay.h"
#include "trainer/auto/planner.h"
#include "trainer/ops/exec.h"
#include "trainer/train_options.h"

namespace strata {

// The work of `c`'s pipeline ranks for `world` trainers (the plan the trainer resolves for
// ApplyChoice(job, c)), on the CPU: each rank's model on its own allocator (tensor-parallel
// layers over the replay's tp group, their collectives real), inputs from the job's data source
// at c.micro_batch samples. InvalidArgument when the plan does not resolve, has context
// parallelism, or the exec is not the CPU's.
Result<ReplayWorkFactory> UnitReplayWork(const TrainJob& job, const ops::Exec& exec, const PlanChoice& c, int world);

}  // namespace strata
