// elastic_split.cc: ElasticSplit.
#include "trainer/elastic_split.h"

#include "common/check.h"

namespace strata {

ElasticSplit::ElasticSplit(Node& node, int micro_batches, int lease_steps)
    : node_(node), micro_(micro_batches), lease_steps_(lease_steps) {}

Result<int64_t> ElasticSplit::Join() {
  STRATA_ASSIGN_OR_RETURN(schedule_, node_.LeaseSplit(0, wire::SplitChange::JOIN));
  const int64_t first = schedule_.horizon();
  if (schedule_.Slot(node_.rank(), first) < 0) {
    return Status::Internal("the scheduler did not put trainer " + std::to_string(node_.rank()) +
                            " into the data split from step " + std::to_string(first));
  }
  return first;
}

Status ElasticSplit::Ensure(int64_t step) {
  if (step + 2 <= schedule_.horizon()) return Status::OK();
  STRATA_ASSIGN_OR_RETURN(schedule_, node_.LeaseSplit(step + lease_steps_));
  return Status::OK();
}

Result<int64_t> ElasticSplit::Leave() {
  STRATA_ASSIGN_OR_RETURN(schedule_, node_.LeaseSplit(0, wire::SplitChange::LEAVE));
  return schedule_.horizon();
}

bool ElasticSplit::Member(int64_t step) const {
  STRATA_CHECK(step < schedule_.horizon()) << "step " << step << " was not leased (horizon " << schedule_.horizon() << ")";
  return schedule_.Slot(node_.rank(), step) >= 0;
}

std::vector<uint32_t> ElasticSplit::Members(int64_t step) const {
  STRATA_CHECK(step < schedule_.horizon()) << "step " << step << " was not leased (horizon " << schedule_.horizon() << ")";
  const std::vector<int>& ranks = schedule_.Members(step);
  return {ranks.begin(), ranks.end()};
}

SplitPlan::Slot ElasticSplit::At(int64_t position) const {
  const int64_t step = position / micro_;
  STRATA_CHECK(step < schedule_.horizon()) << "data position " << position << " (step " << step
                                           << ") was not leased (horizon " << schedule_.horizon() << ")";
  const int slot = schedule_.Slot(node_.rank(), step);
  STRATA_CHECK(slot >= 0) << "trainer " << node_.rank() << " reads step " << step << ", where it is not in the split";
  // Each step's members read micro_ global batches, one per data position.
  const int64_t before = schedule_.SlotsBefore(step) * micro_ +
                         (position % micro_) * static_cast<int64_t>(schedule_.Members(step).size());
  return {slot, before};
}

}  // namespace strata
