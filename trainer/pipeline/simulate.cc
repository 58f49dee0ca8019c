// simulate.cc: runs every rank's action list on one clock (each rank in its own order, each
// action as soon as its rank is free and its inputs have arrived), checking the lists on the
// way; and the textbook bubbles the simulation is compared with.
#include "trainer/pipeline/simulate.h"

#include <algorithm>
#include <limits>

namespace strata::pipeline {
namespace {

// The per-stage value when measured, else the scalar.
double PerStage(const std::vector<double>& per_stage, double scalar, int stage) {
  return stage >= 0 && stage < static_cast<int>(per_stage.size()) ? per_stage[stage] : scalar;
}

// Each (kind, stage, micro) a step must run once, as an index: F, then B or I, then W.
int Slot(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return 0;
    case ActionKind::kBackward:
    case ActionKind::kBackwardInput:
      return 1;
    default:
      return 2;
  }
}

bool SplitsBackward(ScheduleKind kind) {
  return kind == ScheduleKind::kZbH1 || kind == ScheduleKind::kZbv;
}

// Every compute action a step may run, whether a list holds it and when and where it finished.
class Ledger {
 public:
  Ledger(int stages, int micros)
      : stages_(stages), micros_(micros), entries_(3 * stages * micros) {}

  struct Entry {
    bool seen = false;  // some rank's list holds it
    bool done = false;  // the simulation ran it
    int rank = -1;
    double end = 0;
  };
  Entry& at(ActionKind kind, int stage, int micro) {
    return entries_[(Slot(kind) * stages_ + stage) * micros_ + micro];
  }

 private:
  int stages_, micros_;
  std::vector<Entry> entries_;
};

// The actions `a` needs finished first (at most two): the previous stage's forward; for a
// backward its own forward and the next stage's backward (the last stage's loss is part of
// its forward); for W the I of the same stage and micro-batch.
int Dependencies(const Action& a, int last_stage, ActionKind backward, Action deps[2]) {
  switch (a.kind) {
    case ActionKind::kForward:
      if (a.stage == 0) return 0;
      deps[0] = {ActionKind::kForward, a.stage - 1, a.micro};
      return 1;
    case ActionKind::kBackward:
    case ActionKind::kBackwardInput:
      deps[0] = {ActionKind::kForward, a.stage, a.micro};
      if (a.stage == last_stage) return 1;
      deps[1] = {backward, a.stage + 1, a.micro};
      return 2;
    default:
      deps[0] = {ActionKind::kBackwardInput, a.stage, a.micro};
      return 1;
  }
}

// FailedPrecondition unless each rank's compute actions are exactly the ones it must run.
Status CheckLists(ScheduleKind kind, const PipelineShape& shape,
                  const std::vector<std::vector<Action>>& lists, Ledger& ledger) {
  const bool split = SplitsBackward(kind);
  const int m = shape.micro_batches;
  for (int r = 0; r < shape.pp; ++r) {
    for (const Action& a : lists[r]) {
      if (!a.is_compute()) continue;
      const std::string where = "rank " + std::to_string(r) + " runs " + ToString(a);
      if (a.stage < 0 || a.stage >= shape.num_stages() || a.micro < 0 || a.micro >= m) {
        return Status::FailedPrecondition(where + ": stage or micro-batch out of range (" +
                                          std::to_string(shape.num_stages()) + " stages, " +
                                          std::to_string(m) + " micro-batches)");
      }
      if (RankOfStage(kind, shape, a.stage) != r) {
        return Status::FailedPrecondition(where + ", but stage " + std::to_string(a.stage) +
                                          " is on rank " +
                                          std::to_string(RankOfStage(kind, shape, a.stage)));
      }
      const bool wants_split =
          a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackwardWeight;
      if (a.kind != ActionKind::kForward && wants_split != split) {
        return Status::FailedPrecondition(
            where + ", but " + std::string(ScheduleKindName(kind)) +
            (split ? " splits backward into I and W" : " runs full backward (B)"));
      }
      Ledger::Entry& e = ledger.at(a.kind, a.stage, a.micro);
      if (e.seen) return Status::FailedPrecondition(where + " twice");
      e.seen = true;
    }
  }
  std::vector<ActionKind> kinds = {ActionKind::kForward};
  if (split) {
    kinds.push_back(ActionKind::kBackwardInput);
    kinds.push_back(ActionKind::kBackwardWeight);
  } else {
    kinds.push_back(ActionKind::kBackward);
  }
  std::string missing;
  int count = 0;
  for (ActionKind kind_of : kinds) {
    for (int s = 0; s < shape.num_stages(); ++s) {
      for (int k = 0; k < m; ++k) {
        if (ledger.at(kind_of, s, k).seen) continue;
        if (++count <= 8) missing += " " + ToString(Action{kind_of, s, k});
      }
    }
  }
  if (count > 0) {
    return Status::FailedPrecondition(std::to_string(count) + " actions run on no rank:" + missing +
                                      (count > 8 ? " ..." : ""));
  }
  return Status::OK();
}


// Where the next compute action of rank r could start: its dependencies' ends (plus the hand-off
// when another rank ran them), at the earliest `free_at`; false while one has not run.
bool ReadyAt(const Action& a, int r, int last_stage, ActionKind backward, double comm, double free_at,
             Ledger& ledger, double* start) {
  Action deps[2];
  const int n = Dependencies(a, last_stage, backward, deps);
  *start = free_at;
  for (int d = 0; d < n; ++d) {
    const Ledger::Entry& e = ledger.at(deps[d].kind, deps[d].stage, deps[d].micro);
    if (!e.done) return false;
    *start = std::max(*start, e.end + (e.rank != r ? comm : 0.0));
  }
  return true;
}

// The event-driven clock of processor sharing (Costs::slots > 0): between two events (an action
// ends, or a waiting one's inputs arrive) the k ranks computing each progress at min(1, slots/k).
template <typename Duration>
void RunShared(const std::vector<std::vector<Action>>& lists, const Costs& costs, int last_stage,
               ActionKind backward, const Duration& duration, Ledger& ledger, std::vector<size_t>& next,
               Simulation& sim) {
  const size_t p = lists.size();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<bool> running(p, false);
  std::vector<double> remaining(p, 0), started(p, 0);
  double now = 0;
  for (;;) {
    double wake = inf;
    for (size_t r = 0; r < p; ++r) {
      if (running[r]) continue;
      while (next[r] < lists[r].size() && !lists[r][next[r]].is_compute()) ++next[r];
      if (next[r] == lists[r].size()) continue;
      const Action& a = lists[r][next[r]];
      double start = 0;
      if (!ReadyAt(a, static_cast<int>(r), last_stage, backward, costs.comm, now, ledger, &start)) continue;
      if (start > now) {
        wake = std::min(wake, start);
        continue;
      }
      running[r] = true;
      remaining[r] = duration(a);
      started[r] = now;
    }
    const auto k = static_cast<double>(std::count(running.begin(), running.end(), true));
    if (k == 0) {
      if (wake == inf) return;  // done, or stuck (the caller names the stuck actions)
      now = wake;
      continue;
    }
    const double rate = std::min(1.0, costs.slots / k);
    double dt = inf;
    for (size_t r = 0; r < p; ++r) {
      if (running[r]) dt = std::min(dt, remaining[r] / rate);
    }
    const bool ends = dt <= wake - now;
    if (!ends) dt = wake - now;
    now += dt;
    for (size_t r = 0; r < p; ++r) {
      if (!running[r]) continue;
      remaining[r] -= dt * rate;
      // The action(s) setting dt end now; float error must not leave a sliver behind.
      if (!ends || remaining[r] > 1e-12 * std::max(1.0, now)) continue;
      const Action& a = lists[r][next[r]];
      ledger.at(a.kind, a.stage, a.micro) = {true, true, static_cast<int>(r), now};
      sim.ranks[r].push_back({a, started[r], now});
      sim.busy[r] += now - started[r];
      sim.makespan = std::max(sim.makespan, now);
      running[r] = false;
      ++next[r];
    }
  }
}

}  // namespace

double Costs::F(int stage) const { return PerStage(f_stage, f, stage); }
double Costs::B(int stage) const { return PerStage(b_stage, b, stage); }
double Costs::I(int stage) const { return PerStage(i_stage, i, stage); }
double Costs::W(int stage) const { return PerStage(w_stage, w, stage); }

double Costs::Of(const Action& a) const {
  if (!each.empty()) {
    auto it = each.find({static_cast<int>(a.kind), a.stage, a.micro});
    if (it != each.end()) return it->second;
  }
  switch (a.kind) {
    case ActionKind::kForward:
      return F(a.stage);
    case ActionKind::kBackward:
      return B(a.stage);
    case ActionKind::kBackwardInput:
      return I(a.stage);
    default:
      return W(a.stage);
  }
}

Result<Simulation> SimulateActions(ScheduleKind kind, const PipelineShape& shape,
                                   const std::vector<std::vector<Action>>& lists,
                                   const Costs& costs) {
  STRATA_RETURN_IF_ERROR(Validate(kind, shape));
  if (static_cast<int>(lists.size()) != shape.pp) {
    return Status::InvalidArgument("simulate: " + std::to_string(lists.size()) +
                                   " action lists for pp " + std::to_string(shape.pp));
  }
  Ledger ledger(shape.num_stages(), shape.micro_batches);
  STRATA_RETURN_IF_ERROR(CheckLists(kind, shape, lists, ledger));

  const int p = shape.pp;
  const int last_stage = shape.num_stages() - 1;
  const ActionKind backward =
      SplitsBackward(kind) ? ActionKind::kBackwardInput : ActionKind::kBackward;
  auto duration = [&](const Action& a) { return costs.Of(a); };

  Simulation sim;
  sim.ranks.resize(p);
  sim.busy.assign(p, 0.0);
  std::vector<size_t> next(p, 0);
  if (costs.slots > 0) {
    RunShared(lists, costs, last_stage, backward, duration, ledger, next, sim);
  } else {
    std::vector<double> free_at(p, 0.0);
    // Each pass runs, on every rank, the actions whose inputs are done. Because a rank runs its
    // list in order, the start of an action depends only on its rank's previous action and its
    // dependencies, so this order gives the same times as an event-driven clock would.
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < p; ++r) {
        for (; next[r] < lists[r].size(); ++next[r]) {
          const Action& a = lists[r][next[r]];
          if (!a.is_compute()) continue;
          double start = 0;
          if (!ReadyAt(a, r, last_stage, backward, costs.comm, free_at[r], ledger, &start)) break;
          const double end = start + duration(a);
          ledger.at(a.kind, a.stage, a.micro) = {true, true, r, end};
          sim.ranks[r].push_back({a, start, end});
          sim.busy[r] += end - start;
          sim.makespan = std::max(sim.makespan, end);
          free_at[r] = end;
          progress = true;
        }
      }
    }
  }

  std::string stuck;
  for (int r = 0; r < p; ++r) {
    if (next[r] == lists[r].size()) continue;
    const Action& a = lists[r][next[r]];
    Action deps[2];
    const int n = Dependencies(a, last_stage, backward, deps);
    stuck += "; rank " + std::to_string(r) + " at " + ToString(a) + " waits for";
    for (int d = 0; d < n; ++d) {
      if (!ledger.at(deps[d].kind, deps[d].stage, deps[d].micro).done) {
        stuck += " " + ToString(deps[d]);
      }
    }
  }
  if (!stuck.empty()) return Status::FailedPrecondition("pipeline schedule deadlocks" + stuck);

  double idle = 0;
  for (int r = 0; r < p; ++r) idle += sim.makespan - sim.busy[r];
  sim.bubble = sim.makespan > 0 ? idle / (p * sim.makespan) : 0.0;

  // A rank runs its list in order, so its live activations at any time are those of a prefix.
  const ActionKind frees =
      SplitsBackward(kind) ? ActionKind::kBackwardWeight : ActionKind::kBackward;
  sim.peak_live.assign(p, 0);
  for (int r = 0; r < p; ++r) {
    int live = 0;
    for (const Action& a : lists[r]) {
      if (a.kind == ActionKind::kForward) sim.peak_live[r] = std::max(sim.peak_live[r], ++live);
      if (a.kind == frees) --live;
    }
  }
  return sim;
}

Result<Simulation> Simulate(ScheduleKind kind, const PipelineShape& shape, const Costs& costs) {
  STRATA_RETURN_IF_ERROR(Validate(kind, shape));
  std::vector<std::vector<Action>> lists;
  for (int r = 0; r < shape.pp; ++r) {
    STRATA_ASSIGN_OR_RETURN(std::vector<Action> list, BuildComputeActions(kind, shape, r));
    lists.push_back(std::move(list));
  }
  return SimulateActions(kind, shape, lists, costs);
}

double TextbookBubble(ScheduleKind kind, const PipelineShape& shape) {
  const double p = shape.pp, v = shape.vpp, m = shape.micro_batches;
  switch (kind) {
    case ScheduleKind::kGpipe:
    case ScheduleKind::k1F1B:
      // Each rank idles p-1 forward+backward times while the pipeline fills and drains,
      // against m of them of work: (p-1)/(m+p-1).
      return (p - 1) / (m + p - 1);
    case ScheduleKind::kInterleaved:
      // The fill and drain still cost p-1 stage times, but a stage is 1/v of a rank's layers
      // and a rank runs v m of them: (p-1)/(v m + p - 1).
      return (p - 1) / (v * m + p - 1);
    case ScheduleKind::kZbH1:
      // Each rank computes 3m. With m >= p the deferred W's fill every gap but rank 0's wait
      // for its first I, (p-1)(F + I - W) = p-1, where 1F1B idles (p-1)(F + I + W) = 3(p-1):
      // a third of 1F1B's idle time, bubble (p-1)/(3m+p-1). With m < p there are too few W's:
      // the last rank alternates F and I, so I's reach rank 0 every 2 from 2p-1 on and the
      // step ends at 2m + 2p - 1, after rank 0's last I and W.
      return 1 - 3 * m / std::max(3 * m + p - 1, 2 * m + 2 * p - 1);
    case ScheduleKind::kZbv:
      // Each rank computes 6m stage actions; rank r idles r while the V fills and p-1-r while
      // it drains, so the bubble is (p-1)/(6m+p-1): half ZB-H1's for the same model, since a
      // stage is half a rank's layers (the paper's "zero bubble" is this, as m grows). With
      // fewer than about 3p/2 micro-batches the V never fills and the construction takes
      // 4m + 4p - 2 (found by the simulator for p <= 8, m <= 16, and tested there).
      return 1 - 6 * m / std::max(6 * m + p - 1, 4 * m + 4 * p - 2);
  }
  return 0;
}

}  // namespace strata::pipeline
