// auto_plan.h: AutoPlan, the trainer's plan derived from the job's `auto` section. The
// placements the job writes go through the sharding rules over the model's ops, forward and
// backward: every tensor gets a placement, every reshard is listed with its bytes, and each mesh
// dimension is matched to a plan the trainer already runs (data parallel or Megatron tensor
// parallel), whose parallel.dp and parallel.tp the job then gets. One trainer, not a second.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/mesh.h"
#include "common/status.h"
#include "trainer/auto/propagate.h"
#include "trainer/train_options.h"

namespace strata {

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
  // gpt: what the propagation derived (roles per mesh dimension: "model" or "data", which map
  // to tp and dp), with its cost.
  std::optional<Propagation> propagation;

  // What strata-trainer logs: the mesh's roles, each tensor's placement, each reshard with its
  // bytes (the `--explain` of issue #19, for the ops the seeds' MLP has).
  std::vector<std::string> Explain() const;
};

// The plan the job's `auto` section derives. The mlp (the seeds' examples) is walked op by op
// through the rules; gpt goes through sharding propagation (propagate.h) from its annotations,
// and the result must be a plan the trainer runs: per mesh dimension, data parallelism (the
// batch split, every parameter replicated) or Megatron's tensor parallelism (qkv and fc1 by
// columns, proj and fc2 by rows, the token table by vocabulary, the head by columns with the
// vocab-parallel loss). InvalidArgument naming the tensor and mesh dimension otherwise; ctr is
// Unimplemented.
Result<AutoPlan> DeriveAutoPlan(const TrainJob& job);
// DeriveAutoPlan's gpt (gpt_plan.cc).
Result<AutoPlan> DeriveGptAutoPlan(const TrainJob& job);

// Derives the plan and writes its parallel.dp, tp, pp (and the partition) into `job`. InvalidArgument when
// the job also set them to something else. Run where the job is loaded (the number of trainers
// may still come from the environment then).
Status ApplyAutoPlan(TrainJob& job);
// InvalidArgument naming auto.mesh unless `trainers` is the mesh's size.
Status CheckAutoWorld(const TrainJob& job, int trainers);

}  // namespace strata
