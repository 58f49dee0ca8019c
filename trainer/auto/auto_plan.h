// auto_plan.h: AutoPlan, the trainer's plan derived from the job's `auto` section. The
// placements the job writes go through the sharding rules over the model's ops, forward and
// backward: every tensor gets a placement, every reshard is listed with its bytes, and each mesh
// dimension is matched to a plan the trainer already runs (data parallel or Megatron tensor
// parallel), whose parallel.dp and parallel.tp the job then gets. One trainer, not a second.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/mesh.h"
#include "common/status.h"
#include "trainer/train_options.h"

namespace strata {

struct DerivedTensor {
  std::string name;
  Shape shape;
  std::vector<Placement> placements;
};

// One reshard the rules asked for: `what` it moves, from which placements to which, on which
// mesh (stage), the steps (reshard.h) and the bytes the rank at coordinate 0 of that mesh counts
// for it. Activations' reshards happen once per micro-batch, gradient synchronisations once per
// step. A hand-off between meshes is on the mesh it leaves (forward) or reaches (backward).
struct DerivedReshard {
  std::string what;
  Shape shape;
  std::vector<Placement> from, to;
  std::string steps;
  uint64_t bytes = 0;
  bool per_step = false;  // a gradient's synchronisation (else per micro-batch)
  int mesh = 0;
};

struct AutoPlan {
  ProcessMesh mesh = *ProcessMesh::Make({{"x", 1}});  // the shape of every mesh (auto.meshes)
  // Per mesh dimension: "dp", "tp", or "" for a dimension of size 1.
  std::vector<std::string> roles;
  int dp = 1, tp = 1;
  int pp = 1;  // w0 and w1 on two meshes: two pipeline stages, fc2 starting the second
  std::vector<DerivedTensor> tensors;   // forward, then backward, in op order
  std::vector<DerivedReshard> reshards;
  // What rank 0 (coordinate 0 of mesh 0, the first stage) moves, by operation ("all_reduce", "send", "recv";
  // CommOpName's words): per micro-batch (activations) and per step (gradients).
  std::map<std::string, uint64_t> per_micro_batch, per_step;

  // What strata-trainer logs: the mesh's roles, each tensor's placement, each reshard with its
  // bytes (the `--explain` of issue #19, for the ops the seeds' MLP has).
  std::vector<std::string> Explain() const;
};

// The plan the job's `auto` section derives. The model must be the mlp (the seeds' examples);
// other models are Unimplemented until the propagation pass exists. InvalidArgument naming the
// tensor and mesh dimension when placements derive no plan the trainer runs (it runs the input
// Shard(0) with replicated weights, data parallel, and w0 Shard(1) with w1 Shard(0), tensor
// parallel, one dimension each).
Result<AutoPlan> DeriveAutoPlan(const TrainJob& job);

// Derives the plan and writes its parallel.dp, tp, pp (and the partition) into `job`. InvalidArgument when
// the job also set them to something else. Run where the job is loaded (the number of trainers
// may still come from the environment then).
Status ApplyAutoPlan(TrainJob& job);
// InvalidArgument naming auto.mesh unless `trainers` is the mesh's size.
Status CheckAutoWorld(const TrainJob& job, int trainers);

}  // namespace strata
