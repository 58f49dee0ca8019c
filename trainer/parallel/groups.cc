// groups.cc: MakeParallelGroups.
#include "trainer/parallel/groups.h"

#include <algorithm>

namespace strata {
namespace {

// The communicator of `rank` within the group along `dim` that holds it, named after the
// group's first world rank.
Result<std::unique_ptr<Communicator>> GroupAlong(const ParallelPlan& plan, int rank,
                                                 const std::string& dim,
                                                 const CommunicatorFactory& make) {
  const std::vector<int> group = plan.mesh.GroupOf(rank, dim);
  if (group.size() < 2) return std::unique_ptr<Communicator>();
  const int index = static_cast<int>(std::find(group.begin(), group.end(), rank) - group.begin());
  const std::string name = "trainers/" + dim + "/" + std::to_string(group.front());
  Result<std::unique_ptr<Communicator>> comm = make(name, index, static_cast<int>(group.size()));
  if (!comm.ok()) return comm.status().WithContext("making the " + dim + " group " + name);
  return comm;
}

// The communicator over the ranks differing from `rank` along dimensions `dims` only.
Result<std::unique_ptr<Communicator>> GroupOver(const ParallelPlan& plan, int rank, const std::vector<std::string>& dims,
                                                const std::string& label, const CommunicatorFactory& make) {
  for (const std::vector<int>& group : plan.mesh.GroupsOver(dims)) {
    const auto it = std::find(group.begin(), group.end(), rank);
    if (it == group.end()) continue;
    if (group.size() < 2) return std::unique_ptr<Communicator>();
    const std::string name = "trainers/" + label + "/" + std::to_string(group.front());
    Result<std::unique_ptr<Communicator>> comm = make(name, static_cast<int>(it - group.begin()), static_cast<int>(group.size()));
    if (!comm.ok()) return comm.status().WithContext("making the " + label + " group " + name);
    return comm;
  }
  return Status::Internal("rank " + std::to_string(rank) + " in no group of " + plan.mesh.ToString());
}

}  // namespace

Result<ParallelGroups> MakeParallelGroups(const ParallelPlan& plan, int rank,
                                          const CommunicatorFactory& make, bool dp_group) {
  if (rank < 0 || rank >= plan.mesh.size()) {
    return Status::InvalidArgument("trainer rank " + std::to_string(rank) + " outside the plan's " +
                                   plan.mesh.ToString());
  }
  ParallelGroups g;
  g.rank = rank;
  const std::vector<int> c = plan.mesh.Coords(rank);
  g.pp_rank = c[plan.mesh.DimIndex("pp")];
  g.dp_rank = c[plan.mesh.DimIndex("dp")];
  g.tp_rank = c[plan.mesh.DimIndex("tp")];
  const bool cp = plan.mesh.HasDim("cp");
  if (cp) g.cp_rank = c[plan.mesh.DimIndex("cp")];
  // Every rank makes its groups in the same order (tp, cp, dp, pp), so the rendezvous of one
  // group never waits on a rank that is still in another's.
  STRATA_ASSIGN_OR_RETURN(g.tp, GroupAlong(plan, rank, "tp", make));
  if (cp) {
    STRATA_ASSIGN_OR_RETURN(g.cp, GroupAlong(plan, rank, "cp", make));
  }
  if (dp_group) {
    if (cp) {
      STRATA_ASSIGN_OR_RETURN(g.dp, GroupOver(plan, rank, {"dp", "cp"}, "dpcp", make));
    } else {
      STRATA_ASSIGN_OR_RETURN(g.dp, GroupAlong(plan, rank, "dp", make));
    }
  }
  STRATA_ASSIGN_OR_RETURN(g.pp, GroupAlong(plan, rank, "pp", make));
  return g;
}

}  // namespace strata
