// planner.h: the planner of `parallel.auto` and `strata-plan JOB` (issue #19): enumerates whole
// plans for a job's model, world and global batch (dp x tp x pp x vpp, schedule, micro-batches,
// ZeRO stage, recomputation), drops those the trainer refuses (ResolvePlan's rules) and those
// over the memory budget, and predicts each one's step time from measured costs: per-unit
// F/B/I/W times and activation bytes (calibrate.h), collective costs (comm_costs.h), the bubble
// from the schedule simulator (pipeline/simulate.h), and the dp gradient sync's overlap with
// backward. Pure functions of their inputs: every trainer given the same calibration ranks the
// same plans the same way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/auto/calibrate.h"
#include "trainer/auto/comm_costs.h"
#include "trainer/auto/pipeline_replay.h"
#include "trainer/parallel/plan.h"
#include "trainer/train_options.h"

namespace strata {

// One point of the plan space. `micro_batch`: samples per rank per micro-batch,
// global_batch / (micro_batches x dp).
struct PlanChoice {
  int dp = 1, tp = 1, pp = 1, vpp = 1;
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::k1F1B;
  int micro_batches = 1;
  int zero = 0;
  ParallelOptions::Recompute recompute = ParallelOptions::Recompute::kNone;
  int64_t micro_batch = 1;
  // The stage cut the prediction balanced on measured F+B ("3,6"), or "params" before it.
  std::string partition = "params";

  std::string ToString() const;  // "dp2 tp1 pp2 1f1b m4 zero1 rc=none"
};

struct PlannerOptions {
  int world = 1;                  // trainers
  int64_t global_batch = 0;       // samples a step (train.batch_size x micro-batches)
  int64_t memory_limit_bytes = 0; // per device; 0: no budget
  // CPU cores the world's processes share; a world larger than that slows each rank's compute
  // by world / cores (the processes take turns). 0: one core per process.
  int cores = 0;
  int max_micro_batches = 16;
  // Replay every plan of more than one rank on this host, even with a core per rank (PlanJob
  // sets it on the CPU): a trainer's step costs more than its calibrated units add up to (the
  // allocations, the loss head, a tp layer's slices and its collectives between its kernels;
  // the seeds' mlp on 2 trainers: simulated pipelines and dp plans 10-23% fast, tp plans 30-40%),
  // and the replay runs the model itself. Without it only plans whose ranks outnumber the cores
  // are replayed.
  bool replay_all = false;
  bool overlap = true;            // sync.overlap: the dp gradient sync overlaps backward
  // Bytes of one activation value, what tensor-parallel all-reduces and pipeline hand-offs
  // carry: 4 (fp32: the trainer today) or 2 (bf16 compute, a stated device: device_model.h).
  int value_bytes = 4;
  // The memory formulas. false: fp32 weights, gradients and optimizer state (the trainer
  // today). true: mixed precision as Megatron keeps it: bf16 weights (2 B a parameter), fp32
  // gradients (4 B), an fp32 master copy beside the optimizer's moments (4 + 8 B for Adam),
  // ZeRO sharding the master with the moments, and ZeRO's all-gathers moving bf16 weights.
  bool mixed_precision = false;
};

struct PlanMemory {
  int64_t params = 0, grads = 0, optimizer = 0;  // by the ZeRO formulas, during a step
  int64_t activations = 0;  // the schedule's most live micro-batch stages x a stage's saved bytes
  int64_t transient = 0;    // the largest unit's working memory above its saved bytes
  int64_t total() const { return params + grads + optimizer + activations + transient; }
};

struct PlanPrediction {
  PlanChoice choice;
  PlanMemory memory;   // the pipeline rank that holds the most
  double step_s = 0;   // compute + bubble + exposed communication
  double compute_s = 0, bubble_s = 0, comm_s = 0;
  double optimizer_s = 0;  // part of compute_s
  bool fits = true;
  // A pipeline whose ranks outnumber the cores is measured, not simulated (pipeline_replay.h):
  // its key in Calibration::pipeline_s, whether the step above used that measurement, and,
  // when it is not in the calibration yet, what to replay.
  std::string pipeline_key;
  bool pipeline_replayed = false;
  std::optional<PipelineReplayRequest> replay;
};

// A plan's step as the replay measures it: the choice, its local micro-batch, the stage cut and
// the replay's kind ("units": the model's own compute).
std::string PipelineKey(const PlanChoice& c);

// The job the trainer runs for `c`: parallel.dp/tp/pp/vpp/schedule/zero/recompute/partition,
// train.micro_batches and train.batch_size (the global micro-batch, micro_batch x dp).
TrainJob ApplyChoice(const TrainJob& job, const PlanChoice& c);

// Every choice the trainer accepts for `o.world` trainers: ResolvePlan's rules on ApplyChoice's
// job (divisibility, schedules, units per stage, tensor-parallel splits), ZeRO-3 only with pp 1
// and a whole backward, ZeRO only with dp > 1, selective recompute only for gpt, pp > 1 with one
// schedule for pp 1. InvalidArgument naming the field when the job cannot be planned at all.
Result<std::vector<PlanChoice>> EnumeratePlans(const TrainJob& job, const PlannerOptions& o);

// The (micro_batch, recompute) pairs the choices need calibrated.
std::vector<ProfileKey> NeededProfiles(const std::vector<PlanChoice>& choices);

// Gpt's units as tp rank 0 holds them (Megatron's split: 1/tp of every block but its norms and
// row layers' biases, of the token table and of the head); other models' parameters / tp.
std::vector<UnitSpec> ShardUnitsForTp(const ModelOptions& m, std::vector<UnitSpec> units, int tp);

// Memory, step time and its parts for `c`; fills c.partition with the balanced cut.
// NotFound when the calibration lacks the choice's profiles.
Result<PlanPrediction> Predict(const TrainJob& job, PlanChoice c, const Calibration& cal, const CommCosts& comm,
                               const PlannerOptions& o);

struct RankedPlans {
  std::vector<PlanPrediction> plans;  // fitting plans, fastest first (ties: less memory, then fewer ranks split)
  int enumerated = 0, over_memory = 0;
};
Result<RankedPlans> RankPlans(const TrainJob& job, const std::vector<PlanChoice>& choices, const Calibration& cal,
                              const CommCosts& comm, const PlannerOptions& o);

}  // namespace strata
