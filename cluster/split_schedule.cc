// split_schedule.cc: SplitSchedule.
#include "cluster/split_schedule.h"

#include <algorithm>

namespace strata {

SplitSchedule::SplitSchedule(std::vector<int> trainers) {
  std::sort(trainers.begin(), trainers.end());
  entries_.push_back({0, std::move(trainers)});
}

void SplitSchedule::Lease(int64_t until) { horizon_ = std::max(horizon_, until); }

SplitEntry& SplitSchedule::EntryAtHorizon() {
  if (entries_.empty() || entries_.back().from_step < horizon_) {
    SplitEntry next{horizon_, entries_.empty() ? std::vector<int>{} : entries_.back().trainers};
    entries_.push_back(std::move(next));
  }
  return entries_.back();
}

int64_t SplitSchedule::Join(int rank) {
  const std::vector<int>& now = entries_.empty() ? std::vector<int>{} : entries_.back().trainers;
  if (std::binary_search(now.begin(), now.end(), rank)) return horizon_;
  std::vector<int>& t = EntryAtHorizon().trainers;
  t.insert(std::lower_bound(t.begin(), t.end(), rank), rank);
  return horizon_;
}

int64_t SplitSchedule::Leave(int rank) {
  if (entries_.empty()) return horizon_;
  const std::vector<int>& now = entries_.back().trainers;
  if (!std::binary_search(now.begin(), now.end(), rank)) return horizon_;
  std::vector<int>& t = EntryAtHorizon().trainers;
  t.erase(std::lower_bound(t.begin(), t.end(), rank));
  // An entry equal to the one before it says nothing: fold it back.
  if (entries_.size() >= 2 && entries_[entries_.size() - 2].trainers == t) entries_.pop_back();
  return horizon_;
}

const std::vector<int>& SplitSchedule::Members(int64_t step) const {
  static const std::vector<int> kNone;
  const SplitEntry* in_force = nullptr;
  for (const SplitEntry& e : entries_) {
    if (e.from_step > step) break;
    in_force = &e;
  }
  return in_force ? in_force->trainers : kNone;
}

int SplitSchedule::Slot(int rank, int64_t step) const {
  const std::vector<int>& m = Members(step);
  auto it = std::lower_bound(m.begin(), m.end(), rank);
  return it != m.end() && *it == rank ? static_cast<int>(it - m.begin()) : -1;
}

int64_t SplitSchedule::SlotsBefore(int64_t step) const {
  int64_t slots = 0;
  for (size_t i = 0; i < entries_.size() && entries_[i].from_step < step; ++i) {
    const int64_t end = i + 1 < entries_.size() ? std::min(step, entries_[i + 1].from_step) : step;
    slots += (end - entries_[i].from_step) * static_cast<int64_t>(entries_[i].trainers.size());
  }
  return slots;
}

void SplitSchedule::ToWire(wire::SplitSchedule::Builder out) const {
  out.setHorizon(horizon_);
  auto list = out.initEntries(static_cast<unsigned>(entries_.size()));
  for (unsigned i = 0; i < entries_.size(); ++i) {
    list[i].setFromStep(entries_[i].from_step);
    auto t = list[i].initTrainers(static_cast<unsigned>(entries_[i].trainers.size()));
    for (unsigned j = 0; j < entries_[i].trainers.size(); ++j) t.set(j, entries_[i].trainers[j]);
  }
}

SplitSchedule SplitSchedule::FromWire(wire::SplitSchedule::Reader in) {
  SplitSchedule s;
  s.horizon_ = in.getHorizon();
  for (auto e : in.getEntries()) {
    SplitEntry entry{e.getFromStep(), {}};
    for (int32_t r : e.getTrainers()) entry.trainers.push_back(r);
    // A peer's garbage must not break the invariants the lookups rely on.
    std::sort(entry.trainers.begin(), entry.trainers.end());
    entry.trainers.erase(std::unique(entry.trainers.begin(), entry.trainers.end()), entry.trainers.end());
    if (!s.entries_.empty() && entry.from_step <= s.entries_.back().from_step) continue;
    s.entries_.push_back(std::move(entry));
  }
  return s;
}

}  // namespace strata
