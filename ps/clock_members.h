// clock_members.h: ClockMembers, an elastic BSP server's record of each clock's trainers (wire
// ClockRequest.memberRanks). The trainers that split step c (the scheduler's split schedule,
// fixed before any of them reads it) each send a clock message of c naming them all; the clock
// is complete, and its pushes may be applied as their mean, once every one of them either sent
// its clock message or was declared dead. So a trainer that joins or leaves changes the
// membership at a clock boundary, no clock is applied without a live member's pushes, and a
// trainer that dies mid-step is left out of the clocks it did not finish (its slice of those
// steps is not read, as for ASP) instead of holding them back for ever.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <vector>

#include "common/status.h"

namespace strata {

// A plain value; not thread-safe (PsServer guards it with its clock lock).
class ClockMembers {
 public:
  // Records trainer `rank`'s clock message of `clock`, naming the trainers that split its step
  // (`ranks`: trainer ranks, ascending, distinct, `rank` among them). A repeat from the same
  // trainer (a retried message) changes nothing. FailedPrecondition, recording nothing, if
  // `ranks` is empty or not ascending, differs from what an earlier message of the clock named,
  // leaves out `rank`, or `rank` was declared dead.
  Status Add(int64_t clock, uint32_t rank, std::span<const uint32_t> ranks);
  // Trainer `rank` was declared dead: the clocks it is a member of and did not clock complete
  // without it, and it may clock nothing more.
  void MarkDead(uint32_t rank);
  bool Dead(uint32_t rank) const { return dead_.count(rank) > 0; }
  // How many members' clock messages `clock` counts, once every member clocked it or is dead;
  // 0 before (or for a clock never stated).
  uint32_t Complete(int64_t clock) const;
  // Forgets the clocks below `clock` (every BSP table applied them).
  void ForgetBelow(int64_t clock);
  size_t clocks() const { return clocks_.size(); }

  // One clock as recorded: the trainers that split its step (ascending) and those that clocked
  // it (in arrival order).
  struct Record {
    int64_t clock = 0;
    std::vector<uint32_t> members, clocked;
  };
  // Every clock not forgotten, ascending, and the ranks declared dead: what a joining server
  // takes in from each older one (wire ClockMembersRecord, MigrateRows.deadRanks).
  std::vector<Record> Records() const;
  std::vector<uint32_t> DeadRanks() const { return {dead_.begin(), dead_.end()}; }
  // Takes another server's record of a clock in: its clocked ranks join this one's (after
  // those here; a repeat changes nothing), dead or not, since that server counted them.
  // FailedPrecondition, taking nothing, if its members are empty or not ascending, leave out a
  // rank it says clocked, or differ from the members recorded here.
  Status Merge(const Record& record);

 private:
  struct Entry {
    std::vector<uint32_t> members;  // ascending
    std::vector<uint32_t> clocked;  // distinct, in arrival order
  };
  std::map<int64_t, Entry> clocks_;
  std::set<uint32_t> dead_;
};

}  // namespace strata
