// clock_members.cc: ClockMembers.
#include "ps/clock_members.h"

#include <algorithm>
#include <string>

namespace strata {

Status ClockMembers::Add(int64_t clock, uint32_t sender, uint32_t members) {
  const std::string where = "clock " + std::to_string(clock) + " from node " + std::to_string(sender);
  if (members == 0) {
    return Status::FailedPrecondition(where + ": an elastic BSP clock message must state how many trainers split its "
                                      "step (clock.members), not 0");
  }
  auto it = clocks_.find(clock);
  if (it != clocks_.end()) {
    Entry& e = it->second;
    if (e.members != members) {
      return Status::FailedPrecondition(where + " states " + std::to_string(members) +
                                        " trainers split the step; an earlier clock message of it stated " +
                                        std::to_string(e.members) + " (the trainers disagree on the data split)");
    }
    if (std::find(e.senders.begin(), e.senders.end(), sender) != e.senders.end()) return Status::OK();
    if (e.senders.size() >= e.members) {
      return Status::FailedPrecondition(where + ": its " + std::to_string(e.members) +
                                        " trainers all clocked it already; node " + std::to_string(sender) +
                                        " is not in its step's split");
    }
    e.senders.push_back(sender);
    return Status::OK();
  }
  clocks_.emplace(clock, Entry{members, {sender}});
  return Status::OK();
}

uint32_t ClockMembers::Complete(int64_t clock) const {
  auto it = clocks_.find(clock);
  if (it == clocks_.end() || it->second.senders.size() < it->second.members) return 0;
  return it->second.members;
}

void ClockMembers::ForgetBelow(int64_t clock) { clocks_.erase(clocks_.begin(), clocks_.lower_bound(clock)); }

}  // namespace strata
