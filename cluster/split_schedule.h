// split_schedule.h: SplitSchedule, which trainers of an elastic job (cluster.elastic) split the
// global batches of each step, and the lease rule that fixes a step's membership before any
// trainer reads that step, so that every step is split by exactly one membership.
//
// The scheduler holds the schedule. A trainer leases steps (`Lease(until)`: the membership of
// every step below `until` is fixed from then on) before it reads them; a trainer joining or
// leaving changes the membership from the first step not fixed yet (the horizon). So each
// step's batch is cut into the same slots by every trainer that reads it: sample i of step k's
// batch is read by exactly one member, whichever trainers join or leave around it.
#pragma once

#include <cstdint>
#include <vector>

#include "common/wire.capnp.h"

namespace strata {

struct SplitEntry {
  int64_t from_step = 0;
  std::vector<int> trainers;  // ranks, ascending; rank r reads slot (index of r)
  bool operator==(const SplitEntry&) const = default;
};

// A plain value; not thread-safe.
class SplitSchedule {
 public:
  SplitSchedule() = default;
  // `trainers` split every step from 0.
  explicit SplitSchedule(std::vector<int> trainers);

  // Fixes the membership of every step below `until` (the horizon only grows).
  void Lease(int64_t until);
  // Adds or removes `rank` from the horizon on; returns that first step under the change.
  // Adding a member or removing a non-member changes nothing (and still returns the horizon).
  int64_t Join(int rank);
  int64_t Leave(int rank);

  // The trainers that split `step` (empty before the first entry).
  const std::vector<int>& Members(int64_t step) const;
  // `rank`'s slot in `step`'s batch, or -1 if it is not a member there.
  int Slot(int rank, int64_t step) const;
  // Slots before step `step`, summed over the steps (the stream position of a sequential
  // source: step k starts at SlotsBefore(k) * per-trainer batch).
  int64_t SlotsBefore(int64_t step) const;

  int64_t horizon() const { return horizon_; }
  const std::vector<SplitEntry>& entries() const { return entries_; }

  void ToWire(wire::SplitSchedule::Builder out) const;
  static SplitSchedule FromWire(wire::SplitSchedule::Reader in);

 private:
  // The entry in force from the horizon on, made if the last one starts earlier.
  SplitEntry& EntryAtHorizon();

  std::vector<SplitEntry> entries_;  // by from_step, ascending
  int64_t horizon_ = 0;              // steps below it are fixed
};

}  // namespace strata
