// plan.h: ParallelPlan, the job's `parallel` section checked against the world it runs on:
// world = dp x cp x tp x pp, ranks laid out Megatron's way (tp fastest, then cp, dp, pp), the
// pipeline schedule valid for (pp, vpp, micro-batches), and the model's units cut into
// pp x vpp stages.
#pragma once

#include <string>
#include <vector>

#include "common/mesh.h"
#include "common/status.h"
#include "trainer/models/model.h"
#include "trainer/pipeline/schedules.h"
#include "trainer/train_options.h"

namespace strata {

struct ParallelPlan {
  int world = 1, dp = 1, tp = 1, pp = 1, vpp = 1;
  int cp = 1;  // context-parallel ranks; the mesh has a "cp" dimension only when cp > 1
  int micro_batches = 1;
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::k1F1B;
  ProcessMesh mesh = *ProcessMesh::Megatron(1, 1, 1);
  // The model's units of each global stage (pp * vpp of them, in model order).
  std::vector<UnitRange> stages;

  pipeline::PipelineShape shape() const { return {pp, vpp, micro_batches}; }
  std::string ToString() const;  // "dp=2 tp=1 pp=2 vpp=1 m=4 1f1b; stages [0,2) [2,4)" (cp=N after dp when > 1)
};

// Checks the job's `parallel` section (and train.micro_batches) for `world` trainers and cuts
// the model's units into stages (partition "params" or an explicit cut; "cost" is resolved by
// the trainer, which measures, and passed here as `unit_costs`). InvalidArgument naming the
// fields otherwise.
Result<ParallelPlan> ResolvePlan(const TrainJob& job, int world,
                                 const std::vector<double>& unit_costs = {});

// InvalidArgument naming the fields unless the job's model and data split over `cp`
// context-parallel ranks (OK for cp 1).
Status CheckContextParallel(const TrainJob& job, int cp);

// Contiguous, non-empty ranges of `costs` (one per unit), `stages` of them, whose largest sum
// is as small as possible (ties: the earliest cut). InvalidArgument when there are fewer
// units than stages.
Result<std::vector<UnitRange>> BalancedPartition(const std::vector<double>& costs, int stages);
// "3,6,9": the first unit of every stage after the first. InvalidArgument unless it has
// stages - 1 strictly increasing entries in (0, units).
Result<std::vector<UnitRange>> ParsePartition(const std::string& cut, int units, int stages);

// The units a rank holding `stages` of `plan` builds: those stages' units; empty (every unit)
// when the plan has one stage.
UnitSelection UnitsOfStages(const ParallelPlan& plan, const std::vector<int>& stages);
// CreateModel with recomputation `rc` set up as the trainer runs it: selective recomputes the
// attention core, full every unit built (each unit's forward is redone in its backward).
Result<std::unique_ptr<Model>> CreateRecomputingModel(ModelOptions options, ParallelOptions::Recompute rc,
                                                      const ops::Exec& exec, const UnitSelection& build = {},
                                                      nn::TpGroup tp = {}, nn::CpGroup cp = {});

}  // namespace strata
