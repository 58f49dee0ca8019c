// server_bsp_moves.cc: PsServer's BSP accumulations on the move (ps/bsp_moves.h). When rows
// change servers in an elastic job (a join: ps/server_migrate.cc; a leave:
// ps/server_leave.cc), the pushes of their clocks not applied yet go with them: the sender takes
// them out of its tables at the switch (no clock applies them there after it), and the receiver
// adds them to its own clocks. A joining server applies no BSP clock until it holds every older
// server's part, then starts from the least applied clock among them: rows from a server that
// was a clock ahead carry no accumulation of that clock, so applying it changes only the others.
// It completes clocks from the older servers' records merged with the clock messages it receives
// itself (from the switch on, a trainer that does not count it has its clock message refused
// and sends it again to every server). A server taking a leaving one's rows applies at once the
// accumulations of a clock it already applied, with that clock's mean. A replica's copy of a
// whole shard carries the same state (AddBspStateLocked, InstallBspState).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>

#include "ps/server.h"
#include "ps/server_table.h"

namespace strata {

Result<uint32_t> PsServer::BspEntryFloats(uint32_t table, uint64_t key, const PsLayout* expect) {
  auto found = FindTable(table);
  if (!found.ok()) return Status::InvalidArgument("no table " + std::to_string(table) + " here");
  const Table& t = **found;
  if (t.spec.consistency != Consistency::kBsp) {
    return Status::InvalidArgument("table \"" + t.spec.name + "\" is not BSP here");
  }
  if (t.spec.kind == TableKind::kDense) {
    if (expect) return Status::InvalidArgument("table \"" + t.spec.name + "\" is dense; only sparse rows move");
    if (key >= t.spec.NumChunks()) {
      return Status::InvalidArgument("chunk " + std::to_string(key) + " of table \"" + t.spec.name + "\" out of range");
    }
  } else if (expect && expect->SparseOwner(key) != Shard()) {
    return Status::InvalidArgument("key " + std::to_string(key) + " of table \"" + t.spec.name +
                                   "\" belongs to server " + std::to_string(expect->SparseOwner(key)) +
                                   ", not this one (" + std::to_string(Shard()) + ")");
  }
  return t.ValueFloats(key);
}

Status PsServer::TakeBspMovesLocked(const PsLayout& before, const PsLayout& after,
                                    std::map<uint32_t, MigrationPlan>* plans) {
  const uint32_t me = Shard();
  const std::vector<ClockMembers::Record> records = clock_members_.Records();
  const std::vector<uint32_t> dead = clock_members_.DeadRanks();
  for (auto& [rank, p] : *plans) {
    p.bsp.clocks = records;
    p.bsp.dead_ranks = dead;
  }
  // The plan an accumulation of `key` goes into (nullptr: it stays here).
  auto receiver = [&](uint64_t key) -> Result<MigrationPlan*> {
    if (before.SparseOwner(key) != me) return nullptr;
    const uint32_t owner = after.SparseOwner(key);
    if (owner == me) return nullptr;
    auto p = plans->find(owner);
    if (p == plans->end()) {
      return Status::Internal("the BSP accumulation of key " + std::to_string(key) + " moves to server " +
                              std::to_string(owner) + ", which is not one this server hands rows to");
    }
    return &p->second;
  };
  for (const auto& [id, tp] : tables_) {
    Table& t = *tp;
    if (t.spec.kind != TableKind::kSparse || t.spec.consistency != Consistency::kBsp) continue;
    std::lock_guard bsp_lock(t.bsp_mu);
    // Checked first: nothing leaves the tables unless everything can.
    for (const auto& [clock, accs] : t.pending) {
      for (const auto& [key, acc] : accs) STRATA_RETURN_IF_ERROR(receiver(key).status());
    }
    for (const auto& [clock, senders] : t.staged) {
      for (const auto& [sender, accs] : senders) {
        for (const auto& [key, acc] : accs) STRATA_RETURN_IF_ERROR(receiver(key).status());
      }
    }
    for (auto& [rank, p] : *plans) p.bsp.tables.push_back({t.spec.id, t.applied_clock, {}, {}});
    auto take = [&](int64_t clock, uint32_t staged_by, std::unordered_map<uint64_t, Table::Acc>& accs) {
      for (auto a = accs.begin(); a != accs.end();) {
        MigrationPlan* p = *receiver(a->first);
        if (!p) {
          ++a;
          continue;
        }
        Table::Acc& acc = a->second;
        p->bsp.tables.back().entries.push_back({clock, a->first, staged_by, acc.pushes, acc.lr, std::move(acc.sum)});
        a = accs.erase(a);
      }
    };
    for (auto it = t.pending.begin(); it != t.pending.end();) {
      take(it->first, 0, it->second);
      it = it->second.empty() ? t.pending.erase(it) : std::next(it);
    }
    for (auto it = t.staged.begin(); it != t.staged.end();) {
      for (auto s = it->second.begin(); s != it->second.end();) {
        take(it->first, s->first + 1, s->second);
        s = s->second.empty() ? it->second.erase(s) : std::next(s);
      }
      it = it->second.empty() ? t.staged.erase(it) : std::next(it);
    }
    for (auto& [rank, p] : *plans) SortEntries(&p.bsp.tables.back());
  }
  return Status::OK();
}

void PsServer::InstallBspMovesLocked(const BspMoves& moves, const std::string& from) {
  const bool joining = taking_over_;
  if (joining) {
    for (const ClockMembers::Record& r : moves.clocks) {
      if (Status s = clock_members_.Merge(r); !s.ok()) spdlog::error("server: from {}: {}", from, s.ToString());
    }
    for (uint32_t rank : moves.dead_ranks) clock_members_.MarkDead(rank);
  }
  uint64_t in = 0, late = 0, dropped = 0;
  for (const BspTableState& state : moves.tables) {
    // Of clocks applied here already: summed per clock and key first (a key's summed pushes and a
    // staged one folded now are one update of their clock, as here), then applied in clock order.
    std::map<int64_t, std::unordered_map<uint64_t, Table::Acc>> late_accs;
    auto found = FindTable(state.table);
    if (!found.ok()) {  // ReadBspMoves checked every table
      spdlog::error("server: the BSP accumulations of table {} from {}: {}", state.table, from,
                    found.status().ToString());
      continue;
    }
    Table& t = **found;
    std::lock_guard bsp_lock(t.bsp_mu);
    if (joining) {
      auto [it, fresh] = takeover_applied_.emplace(state.table, state.applied_clock);
      if (!fresh) it->second = std::min(it->second, state.applied_clock);
    }
    for (const BspEntry& e : state.entries) {  // by clock
      Table::Acc acc{e.sum, e.pushes, e.lr};
      bool staged = e.staged_by != 0;
      const uint32_t sender = e.staged_by - 1;
      if (staged) {
        if (t.dead_pushers.count(sender) || lost_trainers_.count(sender)) {
          ++dropped;  // as DropStagedLocked would have here
          continue;
        }
        // Its clock message reached this server first: folded now.
        if (auto c = trainer_clock_.find(sender); c != trainer_clock_.end() && c->second > e.clock) staged = false;
      }
      if (!joining && e.clock < t.applied_clock) {
        auto m = applied_members_.find(e.clock);
        if (staged || m == applied_members_.end()) {
          // Staged for a clock that went on without its sender, or applied too long ago to know its mean.
          spdlog::error("server: {}'s accumulation of key {} of table \"{}\" for clock {} arrived after this server "
                        "applied that clock{}; dropped",
                        from, e.key, t.spec.name, e.clock, staged ? " without its sender" : "");
          ++dropped;
          continue;
        }
        Table::MergeAcc(late_accs[e.clock][e.key], std::move(acc));
        ++late;
        continue;
      }
      ++in;
      if (staged) {
        Table::MergeAcc(t.staged[e.clock][sender][e.key], std::move(acc));
      } else {
        Table::MergeAcc(t.pending[e.clock][e.key], std::move(acc));
      }
    }
    for (const auto& [clock, accs] : late_accs) {
      const uint32_t members = applied_members_.at(clock);
      t.ApplyAccs(accs, t.spec.aggregate == Aggregate::kMean ? 1.0f / static_cast<float>(members) : 1.0f, clock);
    }
  }
  bsp_moved_in_ += in + late;
  bsp_applied_late_ += late;
  bsp_dropped_ += dropped;
  if (in + late + dropped > 0) {
    spdlog::info("server: {} BSP accumulations from {}: {} wait for their clocks, {} of clocks applied here already "
                 "were applied now{}",
                 in + late + dropped, from, in, late, dropped ? ", " + std::to_string(dropped) + " dropped" : "");
  }
}

void PsServer::FinishTakeOverBspLocked() {
  for (const auto& [id, applied] : takeover_applied_) {
    auto found = FindTable(id);
    if (!found.ok()) continue;
    Table& t = **found;
    std::lock_guard bsp_lock(t.bsp_mu);
    t.applied_clock = applied;
    spdlog::info("server: BSP table \"{}\" applies clocks from {} on", t.spec.name, applied);
  }
  takeover_applied_.clear();
}

void PsServer::AddBspStateLocked(Message* last) {
  BspMoves state;
  for (const auto& [id, t] : tables_) {
    if (t->spec.consistency != Consistency::kBsp) continue;
    std::lock_guard bsp_lock(t->bsp_mu);
    BspTableState s{t->spec.id, t->applied_clock, {}, {}};
    for (const auto& [clock, accs] : t->pending) {
      for (const auto& [key, a] : accs) s.entries.push_back({clock, key, 0, a.pushes, a.lr, a.sum});
    }
    // Elastic BSP: pushes of trainers whose clock message has not come yet, by sender.
    for (const auto& [clock, senders] : t->staged) {
      for (const auto& [sender, accs] : senders) {
        for (const auto& [key, a] : accs) s.entries.push_back({clock, key, sender + 1, a.pushes, a.lr, a.sum});
      }
    }
    SortEntries(&s);
    for (const auto& [key, next] : t->chunk_clock) {
      if (next > t->applied_clock) s.chunk_next.emplace_back(key, next);
    }
    std::sort(s.chunk_next.begin(), s.chunk_next.end());
    state.tables.push_back(std::move(s));
  }
  state.grad_scales.assign(grad_scale_.begin(), grad_scale_.end());
  // Elastic BSP: who split each clock not applied yet and who clocked it, and the trainers
  // counted as dead (ps/clock_members.h); the copy completes those clocks as this server does.
  state.clocks = clock_members_.Records();
  state.dead_ranks = clock_members_.DeadRanks();
  WriteBspMoves(state, last->builder().getBody().getStateTransfer(), last);
}

Status PsServer::InstallBspState(const Message& last) {
  auto chunk = last.reader().getBody().getStateTransfer();
  const size_t first = last.num_payloads() - std::min<size_t>(last.num_payloads(), chunk.getBsp().size());
  // Everything is checked before anything is set.
  auto state = ReadBspMoves(last, chunk, first,
                            [this](uint32_t table, uint64_t key) { return BspEntryFloats(table, key, nullptr); });
  if (!state.ok()) return state.status().WithContext("stateTransfer");
  ClockMembers members;
  for (const ClockMembers::Record& r : state->clocks) STRATA_RETURN_IF_ERROR(members.Merge(r).WithContext("stateTransfer"));
  for (uint32_t rank : state->dead_ranks) members.MarkDead(rank);
  std::lock_guard clocks(clock_mu_);
  clock_members_ = std::move(members);
  for (const BspTableState& s : state->tables) {
    Table& t = **FindTable(s.table);
    std::lock_guard bsp_lock(t.bsp_mu);
    t.pending.clear();
    t.staged.clear();
    t.applied_clock = s.applied_clock;
    for (const BspEntry& e : s.entries) {
      Table::Acc acc{e.sum, e.pushes, e.lr};
      if (e.staged_by != 0) {
        t.staged[e.clock][e.staged_by - 1][e.key] = std::move(acc);
      } else {
        t.pending[e.clock][e.key] = std::move(acc);
      }
    }
    // Chunks that ran ahead: the same next clocks, and the counts of chunks done early per clock
    // that ReadyClockLocked reads.
    t.chunk_clock.clear();
    t.early_done.clear();
    for (const auto& [key, next] : s.chunk_next) {
      t.chunk_clock[key] = next;
      for (int64_t c = s.applied_clock; c < next; ++c) ++t.early_done[c];
    }
  }
  grad_scale_ = {state->grad_scales.begin(), state->grad_scales.end()};
  return Status::OK();
}

}  // namespace strata
