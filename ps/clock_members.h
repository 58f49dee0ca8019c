// clock_members.h: ClockMembers, an elastic BSP server's count of each clock's trainers (wire
// ClockRequest.members). The trainers that split step c (the scheduler's split schedule, fixed
// before any of them reads it) each send a clock message of c stating how many they are; the
// clock is complete, and its pushes may be applied as their mean, once that many distinct
// trainers sent theirs. So a trainer that joins or leaves changes the membership at a clock
// boundary, and no clock is applied without a member's pushes or divided by the wrong count.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "common/status.h"

namespace strata {

// A plain value; not thread-safe (PsServer guards it with its clock lock).
class ClockMembers {
 public:
  // Records `sender`'s clock message of `clock`, stating `members` (> 0) trainers. A repeat from
  // the same sender (a retried message) changes nothing. FailedPrecondition, recording nothing,
  // if `members` is 0, differs from what an earlier message of the clock stated, or `members`
  // other trainers sent theirs already.
  Status Add(int64_t clock, uint32_t sender, uint32_t members);
  // The members of `clock` once all of them sent theirs; 0 before (or for a clock never stated).
  uint32_t Complete(int64_t clock) const;
  // Forgets the clocks below `clock` (every BSP table applied them).
  void ForgetBelow(int64_t clock);
  size_t clocks() const { return clocks_.size(); }

 private:
  struct Entry {
    uint32_t members = 0;
    std::vector<uint32_t> senders;  // distinct, in arrival order
  };
  std::map<int64_t, Entry> clocks_;
};

}  // namespace strata
