// elastic_split.h: ElasticSplit, a trainer's view of an elastic job's data split
// (cluster.elastic): it leases the membership of its next steps from the scheduler
// (cluster/split_schedule.h), joins the split when the trainer joined the job, leaves it when
// the trainer is stopped, and tells the data sources which slice of each global batch to read.
//
// Guarantee: every step is split by exactly one membership, fixed before any trainer reads it,
// so a join or a clean leave (SIGTERM) drops and doubles no sample. A trainer declared dead
// leaves from the first step nobody has leased; the slices of the steps it had leased but not
// trained (at most lease_steps plus what faster trainers leased) are not read by anyone.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cluster/node.h"
#include "trainer/data.h"

namespace strata {

// How far ahead a trainer leases its steps: one scheduler call per this many steps; a trainer
// joining or leaving waits for at most this many steps of the fastest trainer to take effect.
inline constexpr int kElasticLeaseSteps = 8;

// Not thread-safe: the training thread uses it (the data sources read it through SplitPlan).
class ElasticSplit final : public SplitPlan {
 public:
  // `micro_batches` data positions make one step; leases reach `lease_steps` steps ahead.
  ElasticSplit(Node& node, int micro_batches, int lease_steps);

  // This trainer joined the running job: it splits the data from the first step not leased
  // yet, which it returns (the step it starts at).
  Result<int64_t> Join();
  // Leases steps from `step` on if fewer than two are leased (the next step's batch is read
  // ahead, during this one).
  Status Ensure(int64_t step);
  // Leaves the split from the first step not leased yet; returns it: the trainer trains every
  // step before it and stops there.
  Result<int64_t> Leave();
  // Is this trainer a member of `step`'s split? Only for steps Ensure leased.
  bool Member(int64_t step) const;
  // The trainers (ranks, ascending) that split `step` (an elastic BSP clock waits for each of
  // them, or its death, and its mean divides by those that clocked). Only for steps Ensure
  // leased.
  std::vector<uint32_t> Members(int64_t step) const;

  Slot At(int64_t position) const override;

 private:
  Node& node_;
  const int micro_;
  const int lease_steps_;
  SplitSchedule schedule_;  // as of the last lease
};

}  // namespace strata
