// clock_members.cc: ClockMembers.
#include "ps/clock_members.h"

#include <algorithm>
#include <string>

namespace strata {
namespace {

std::string RanksText(std::span<const uint32_t> ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

}  // namespace

Status ClockMembers::Add(int64_t clock, uint32_t rank, std::span<const uint32_t> ranks) {
  const std::string where = "clock " + std::to_string(clock) + " from trainer " + std::to_string(rank);
  if (ranks.empty()) {
    return Status::FailedPrecondition(where + ": an elastic BSP clock message must name the trainers that split its "
                                      "step (clock.memberRanks), not none");
  }
  if (std::adjacent_find(ranks.begin(), ranks.end(), [](uint32_t a, uint32_t b) { return a >= b; }) != ranks.end()) {
    return Status::FailedPrecondition(where + " names the trainers " + RanksText(ranks) +
                                      ", not ascending and distinct (clock.memberRanks)");
  }
  if (!std::binary_search(ranks.begin(), ranks.end(), rank)) {
    return Status::FailedPrecondition(where + ": trainer " + std::to_string(rank) +
                                      " is not in its step's split " + RanksText(ranks));
  }
  if (dead_.count(rank)) {
    return Status::FailedPrecondition(where + ": trainer " + std::to_string(rank) +
                                      " was declared dead; its clocks are no longer counted");
  }
  auto it = clocks_.find(clock);
  if (it == clocks_.end()) {
    clocks_.emplace(clock, Entry{{ranks.begin(), ranks.end()}, {rank}});
    return Status::OK();
  }
  Entry& e = it->second;
  if (!std::equal(e.members.begin(), e.members.end(), ranks.begin(), ranks.end())) {
    return Status::FailedPrecondition(where + " states " + std::to_string(ranks.size()) + " trainers " +
                                      RanksText(ranks) + " split the step; an earlier clock message of it stated " +
                                      std::to_string(e.members.size()) + " " + RanksText(e.members) +
                                      " (the trainers disagree on the data split)");
  }
  if (std::find(e.clocked.begin(), e.clocked.end(), rank) == e.clocked.end()) e.clocked.push_back(rank);
  return Status::OK();
}

void ClockMembers::MarkDead(uint32_t rank) { dead_.insert(rank); }

uint32_t ClockMembers::Complete(int64_t clock) const {
  auto it = clocks_.find(clock);
  if (it == clocks_.end()) return 0;
  const Entry& e = it->second;
  for (uint32_t m : e.members) {
    if (!dead_.count(m) && std::find(e.clocked.begin(), e.clocked.end(), m) == e.clocked.end()) return 0;
  }
  return static_cast<uint32_t>(e.clocked.size());
}

std::vector<ClockMembers::Record> ClockMembers::Records() const {
  std::vector<Record> out;
  for (const auto& [clock, e] : clocks_) out.push_back({clock, e.members, e.clocked});
  return out;
}

Status ClockMembers::Merge(const Record& r) {
  const std::string where = "the record of clock " + std::to_string(r.clock) + " from another server";
  if (r.members.empty() ||
      std::adjacent_find(r.members.begin(), r.members.end(), [](uint32_t a, uint32_t b) { return a >= b; }) !=
          r.members.end()) {
    return Status::FailedPrecondition(where + " names the trainers " + RanksText(r.members) +
                                      ", not ascending, distinct and at least one");
  }
  for (uint32_t rank : r.clocked) {
    if (!std::binary_search(r.members.begin(), r.members.end(), rank)) {
      return Status::FailedPrecondition(where + ": trainer " + std::to_string(rank) + " clocked it but is not in its split " +
                                        RanksText(r.members));
    }
  }
  auto it = clocks_.find(r.clock);
  if (it == clocks_.end()) {
    Entry e{r.members, {}};
    for (uint32_t rank : r.clocked) {
      if (std::find(e.clocked.begin(), e.clocked.end(), rank) == e.clocked.end()) e.clocked.push_back(rank);
    }
    clocks_.emplace(r.clock, std::move(e));
    return Status::OK();
  }
  Entry& e = it->second;
  if (e.members != r.members) {
    return Status::FailedPrecondition(where + " says trainers " + RanksText(r.members) + " split its step; this server " +
                                      "recorded " + RanksText(e.members));
  }
  for (uint32_t rank : r.clocked) {
    if (std::find(e.clocked.begin(), e.clocked.end(), rank) == e.clocked.end()) e.clocked.push_back(rank);
  }
  return Status::OK();
}

void ClockMembers::ForgetBelow(int64_t clock) { clocks_.erase(clocks_.begin(), clocks_.lower_bound(clock)); }

}  // namespace strata
