// groups.h: ParallelGroups, a trainer's place in the plan's mesh (its pp, dp, cp and tp coordinates)
// and one Communicator per mesh dimension it shares with other ranks. Built once at start and
// passed down explicitly (no global, unlike Megatron's parallel_state).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "trainer/comm/communicator.h"
#include "trainer/parallel/plan.h"

namespace strata {

struct ParallelGroups {
  int rank = 0;  // in the world of trainers
  int pp_rank = 0, dp_rank = 0, cp_rank = 0, tp_rank = 0;
  // Null along a dimension of size 1.
  std::unique_ptr<Communicator> pp;  // this rank's pipeline: stages' neighbours
  // The ranks holding the same parameters as this one, whose gradients are averaged: the
  // replicas of this rank's (pp, tp) shard, and with context parallelism every cp rank of
  // each of them (dp x cp ranks: each computed the gradient of its part of the sequences).
  std::unique_ptr<Communicator> dp;
  std::unique_ptr<Communicator> cp;  // the context-parallel ring splitting this rank's sequences
  std::unique_ptr<Communicator> tp;  // the ranks splitting this rank's layers
};

// Makes the communicator of `rank` (of `size`) in the group called `name` (every member passes
// the same name).
using CommunicatorFactory =
    std::function<Result<std::unique_ptr<Communicator>>(const std::string& name, int rank, int size)>;

// Coordinates of `rank` in plan.mesh, and the groups through `make`. Group names say which
// group they are ("trainers/pp/3": the pipeline group holding world rank 3's dp and tp
// coordinates), so that every member rendezvouses on the same one. Groups of size 1 are not
// made, nor the dp group when `dp_group` is false (replicas that meet only on the parameter
// servers, which may run asynchronously, must not wait for each other).
Result<ParallelGroups> MakeParallelGroups(const ParallelPlan& plan, int rank,
                                          const CommunicatorFactory& make, bool dp_group = true);

}  // namespace strata
