// server_clocks.cc: PsServer's clocks: trainers' clock messages, applying BSP clocks, answering
// the pulls parked until their clock, and trainers lost.
#include "ps/server.h"

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ps/server_table.h"

namespace strata {

bool PsServer::PullReadyLocked(const Table& t, int64_t clock, Status* error) const {
  switch (t.spec.consistency) {
    case Consistency::kAsp:
      return true;
    case Consistency::kBsp:
      // Elastic: a clock completes without its dead members (ps/clock_members.h); fixed: it never does.
      if (!lost_trainers_.empty() && t.applied_clock < clock && !node_.options().cluster.elastic) {
        *error = Status::Aborted("BSP table \"" + t.spec.name + "\" cannot reach clock " +
                                 std::to_string(clock) + ": lost " + lost_trainers_.begin()->second);
        return true;
      }
      return t.applied_clock >= clock;
    case Consistency::kSsp:
      return MinClockLocked() >= clock - static_cast<int64_t>(t.spec.staleness);
  }
  return true;
}

std::optional<std::string> PsServer::BspTable() const {
  std::shared_lock lock(tables_mu_);
  for (const auto& [id, t] : tables_) {
    if (t->spec.consistency == Consistency::kBsp) return t->spec.name;
  }
  return std::nullopt;
}

int64_t PsServer::MinClockLocked() const {
  int64_t m = std::numeric_limits<int64_t>::max();
  for (const auto& [id, c] : trainer_clock_) m = std::min(m, c);
  return m;
}


Result<Message> PsServer::Clock(const Request& request, std::vector<Parked>* ready) {
  const uint32_t sender = SenderOf(request.message());
  const auto body = request.message().reader().getBody().getClock();
  const int64_t finished = body.getClock();
  // Elastic BSP clock messages state their members; one that does not is refused if it should.
  const bool counted =
      node_.options().cluster.elastic && (body.getMembers() > 0 || body.getMemberRanks().size() > 0 || BspTable());
  std::lock_guard lock(clock_mu_);
  // Elastic servers: a trainer that has not seen a joining server yet would leave it out of
  // this clock; from the switch on (StartTakeOver, under this lock) it is told to look again.
  // (Not a clock forwarded by the shard's serving holder, which accepted it: its copy follows it.)
  const bool forwarded = HasOrigin(request.message());
  if (const uint32_t stated = body.getServers(); stated > 0 && !forwarded && stated < KeyLayout().servers) {
    ++moved_refused_;
    return Status::FailedPrecondition("clock " + std::to_string(finished) + " from node " + std::to_string(sender) +
                                      " counts " + std::to_string(stated) + " servers (clock.servers), this server's " +
                                      "layout " + std::to_string(KeyLayout().servers) + ": " + std::string(kLayoutMoved));
  }
  if (trainer_clock_.empty() && lost_trainers_.empty()) {
    for (const NodeInfo& n : node_.view().WithRole(Role::kTrainer)) {
      if (n.alive) trainer_clock_[n.id] = 0;
    }
  }
  auto it = trainer_clock_.find(sender);
  if (it == trainer_clock_.end() && !lost_trainers_.count(sender)) {
    // A trainer that joined a running job (its joined event may still be on its way): it
    // starts at the current minimum clock, so it holds nobody back.
    const ClusterView view = node_.view();
    const NodeInfo* n = view.Find(sender);
    if (n && n->role == Role::kTrainer && n->alive) it = trainer_clock_.emplace(sender, MinClockOrZeroLocked()).first;
  }
  if (it == trainer_clock_.end()) {
    if (lost_trainers_.count(sender) && !node_.options().cluster.elastic) {
      // Declared dead while it ran, it may register again (a fixed ASP/SSP job takes it back):
      // the client asks again until then, or gives up once it knows it was not.
      return Status::Unavailable("clock from node " + std::to_string(sender) +
                                 ", which was declared dead: it is counted again once it registers again");
    }
    return Status::FailedPrecondition("clock from node " + std::to_string(sender) + ", which is not a live trainer");
  }
  // Elastic BSP: the clock's trainers, counted before anything else changes (a refused message
  // changes nothing).
  if (counted) {
    const auto wire_ranks = body.getMemberRanks();
    if (wire_ranks.size() != body.getMembers()) {
      return Status::FailedPrecondition("clock " + std::to_string(finished) + " from node " + std::to_string(sender) +
                                        " states " + std::to_string(body.getMembers()) + " members but names " +
                                        std::to_string(wire_ranks.size()) + " (clock.members, clock.memberRanks)");
    }
    std::vector<uint32_t> ranks;
    for (uint32_t r : wire_ranks) ranks.push_back(r);
    const ClusterView view = node_.view();
    const NodeInfo* n = view.Find(sender);
    if (n == nullptr) return Status::FailedPrecondition("clock from node " + std::to_string(sender) + ", not in the view");
    STRATA_RETURN_IF_ERROR(clock_members_.Add(finished, static_cast<uint32_t>(n->rank), ranks));
  }
  STRATA_RETURN_IF_ERROR(TakeGradScaleLocked(finished, body.getGradScale(), sender));
  if (counted) FoldStagedLocked(finished, sender);
  it->second = std::max(it->second, finished + 1);
  AdvanceLocked(ready);
  return request.MakeReply();
}

void PsServer::AdvanceLocked(std::vector<Parked>* ready) {
  const int64_t min_clock = MinClockLocked();
  const float live = static_cast<float>(std::max<size_t>(1, trainer_clock_.size()));
  // Elastic: clock by clock, once its split's trainers all clocked it (ps/clock_members.h).
  const bool counted = node_.options().cluster.elastic;
  int64_t bsp_applied = std::numeric_limits<int64_t>::max();  // the least BSP table's applied clock
  std::shared_lock tables_lock(tables_mu_);  // released before TakeReadyLocked (gradNorm takes it)
  for (auto& [id, tp] : tables_) {
    Table& t = *tp;
    // A joining server applies nothing before it holds every older server's part of its rows.
    if (t.spec.consistency != Consistency::kBsp || taking_over_) continue;
    std::lock_guard bsp_lock(t.bsp_mu);
    const bool mean = t.spec.aggregate == Aggregate::kMean;
    while (true) {
      float scale = mean ? 1.0f / live : 1.0f;
      if (counted) {
        const uint32_t members = clock_members_.Complete(t.applied_clock);
        if (members == 0) break;
        scale = mean ? 1.0f / static_cast<float>(members) : 1.0f;
        applied_members_[t.applied_clock] = members;
      } else if (t.applied_clock >= min_clock || min_clock == std::numeric_limits<int64_t>::max()) {
        break;
      }
      if (auto it = t.pending.find(t.applied_clock); it != t.pending.end()) {
        // Clipped: the mean over the pushers, times the clock's clipping factor (1/pushers is a
        // power of two or 1 for 1, 2, 4... replicas: the same float as all-reduce's mean, clipped).
        const float s = t.spec.clipped ? t.MeanScale() * GradScaleLocked(t.applied_clock) : scale;
        t.ApplyAccs(it->second, s, t.applied_clock);
        t.pending.erase(it);
      }
      t.early_done.erase(t.applied_clock);
      ++t.applied_clock;
    }
    // Staged pushes of applied clocks (from a trainer that pushed after its own clock message):
    // never folded, forgotten.
    t.staged.erase(t.staged.begin(), t.staged.lower_bound(t.applied_clock));
    if (t.spec.pushers > 0 && !t.spec.clipped) {
      // Chunks held back behind an incomplete clock that the clock message just applied.
      std::vector<uint64_t> waiting;
      for (const auto& [clock, accs] : t.pending) {
        for (const auto& [key, acc] : accs) waiting.push_back(key);
      }
      for (uint64_t key : waiting) t.ApplyCompleteLocked(key);
      t.applied_clock = t.ReadyClockLocked();
      std::erase_if(t.chunk_clock, [&](const auto& kv) { return kv.second <= t.applied_clock; });
      std::erase_if(t.early_done, [&](const auto& kv) { return kv.first < t.applied_clock; });
    }
    bsp_applied = std::min(bsp_applied, t.applied_clock);
  }
  // With no BSP table, the clocks every live trainer finished: a table created later starts
  // from there, and a clock some trainers already stated must keep their records.
  const int64_t forget = bsp_applied != std::numeric_limits<int64_t>::max() ? bsp_applied : min_clock;
  if (!taking_over_ && forget != std::numeric_limits<int64_t>::max()) {
    // A joining server's records must reach the clocks its senders left it.
    clock_members_.ForgetBelow(forget);
    clocks_forgotten_below_ = std::max(clocks_forgotten_below_, forget);
    // Kept a while for accumulations that arrive with rows after their clock was applied here.
    if (bsp_applied != std::numeric_limits<int64_t>::max()) {
      applied_members_.erase(applied_members_.begin(), applied_members_.lower_bound(bsp_applied - 4096));
    }
  }
  // Stores act on clock boundaries (expiry, scheduled checkpoints) after BSP applied the clock.
  if (min_clock != std::numeric_limits<int64_t>::max()) {
    const uint64_t clock = static_cast<uint64_t>(min_clock);
    for (auto& [id, tp] : tables_) {
      Table& t = *tp;
      if (clock <= t.store_clock) continue;
      t.store_clock = clock;
      if (Status s = t.store->AdvanceClock(clock); !s.ok()) {
        spdlog::error("server: table \"{}\" at clock {}: {}", t.spec.name, clock, s.ToString());
      }
    }
    grad_scale_.erase(grad_scale_.begin(), grad_scale_.lower_bound(min_clock));
  }
  tables_lock.unlock();
  TakeReadyLocked(ready);
}

void PsServer::TakeReadyLocked(std::vector<Parked>* ready) {
  for (auto it = parked_.begin(); it != parked_.end();) {
    Status error;
    const bool now = it->table ? PullReadyLocked(*it->table, it->clock, &error) : GradNormReadyLocked(it->clock, &error);
    if (now) {
      parked_quota_.Release(it->peer, it->bytes);
      ready->push_back(std::move(*it));
      it = parked_.erase(it);
    } else {
      ++it;
    }
  }
}

void PsServer::AdvanceEarly(Table& t) {
  std::vector<Parked> ready;
  {
    std::lock_guard lock(clock_mu_);
    {
      std::lock_guard bsp_lock(t.bsp_mu);
      t.applied_clock = std::max(t.applied_clock, t.ReadyClockLocked());
      std::erase_if(t.chunk_clock, [&](const auto& kv) { return kv.second <= t.applied_clock; });
      std::erase_if(t.early_done, [&](const auto& kv) { return kv.first < t.applied_clock; });
    }
    TakeReadyLocked(&ready);
  }
  for (Parked& p : ready) HandleParked(p);
}

void PsServer::FoldStagedLocked(int64_t clock, uint32_t sender) {
  std::shared_lock tables_lock(tables_mu_);
  for (auto& [id, t] : tables_) {
    if (t->spec.consistency != Consistency::kBsp) continue;
    std::lock_guard bsp_lock(t->bsp_mu);
    t->FoldStagedLocked(clock, sender);
  }
}

void PsServer::DropDeadTrainerLocked(const NodeInfo& trainer) {
  clock_members_.MarkDead(static_cast<uint32_t>(trainer.rank));
  uint64_t dropped = 0;
  bool bsp = false;
  {
    std::shared_lock tables_lock(tables_mu_);
    for (auto& [id, t] : tables_) {
      if (t->spec.consistency != Consistency::kBsp) continue;
      bsp = true;
      std::lock_guard bsp_lock(t->bsp_mu);
      dropped += t->DropStagedLocked(trainer.id);
    }
  }
  if (!bsp) return;
  bsp_dropped_ += dropped;
  spdlog::warn("server: {} was declared dead; the BSP clocks it did not finish go on without it ({} of its pushed "
               "keys or chunks dropped)",
               trainer.Describe(), dropped);
}

int64_t PsServer::MinClockOrZeroLocked() const {
  const int64_t m = MinClockLocked();
  return m == std::numeric_limits<int64_t>::max() ? 0 : m;
}

void PsServer::TrainerCameBack(const NodeInfo& trainer) {
  // An elastic job's dead trainer left its split for good (its clocks went on without it).
  if (node_.options().cluster.elastic) return;
  std::lock_guard lock(clock_mu_);
  if (!lost_trainers_.erase(trainer.id)) return;
  auto lost = lost_clocks_.find(trainer.id);
  const int64_t clock = lost != lost_clocks_.end() ? lost->second : MinClockOrZeroLocked();
  if (lost != lost_clocks_.end()) lost_clocks_.erase(lost);
  trainer_clock_.emplace(trainer.id, clock);
  spdlog::info("server: {} registered again after it was declared dead; its clocks count again from {}",
               trainer.Describe(), clock);
}

void PsServer::OnNodeEvent(const NodeEvent& e) {
  if (e.node.role != Role::kTrainer) return;
  const bool dead = e.kind == NodeEvent::Kind::kDead, left = e.kind == NodeEvent::Kind::kLeft;
  if (e.kind == NodeEvent::Kind::kRejoined) return TrainerCameBack(e.node);
  if (!dead && !left && e.kind != NodeEvent::Kind::kJoined) return;
  std::vector<Parked> ready;
  {
    std::lock_guard lock(clock_mu_);
    if (trainer_clock_.empty() && lost_trainers_.empty()) {
      for (const NodeInfo& n : e.view.WithRole(Role::kTrainer)) {
        if (n.alive || n.id == e.node.id) trainer_clock_[n.id] = 0;
      }
    }
    if (e.kind == NodeEvent::Kind::kJoined) {
      // Elastic: a joined trainer starts at the current minimum clock (SSP counts it from there).
      trainer_clock_.emplace(e.node.id, MinClockOrZeroLocked());
      return;
    }
    if (auto it = trainer_clock_.find(e.node.id); it != trainer_clock_.end()) {
      if (dead) lost_clocks_[e.node.id] = it->second;
      trainer_clock_.erase(it);
    }
    // A trainer that left cleanly holds no clock back; one that died fails BSP pulls, except in
    // an elastic job, whose clocks complete without it (ps/clock_members.h).
    if (dead) lost_trainers_[e.node.id] = e.node.Describe();
    if (dead && node_.options().cluster.elastic) DropDeadTrainerLocked(e.node);
    AdvanceLocked(&ready);
  }
  // This runs on the I/O thread, and a pull may wait on a leave's freeze, whose holder waits for
  // replies only this thread delivers: the workers answer them.
  for (Parked& p : ready) ParkedToWorker(p);
}

}  // namespace strata
