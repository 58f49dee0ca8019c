// planner.cc: the plan space (EnumeratePlans, ApplyChoice) and RankPlans. Predict is in
// plan_predict.cc.
#include "trainer/auto/planner.h"

#include <algorithm>
#include <set>
#include <sstream>

namespace strata {

using pipeline::ScheduleKind;
using Recompute = ParallelOptions::Recompute;

std::string PlanChoice::ToString() const {
  std::ostringstream o;
  o << "dp" << dp << " tp" << tp << " pp" << pp;
  if (vpp > 1) o << " vpp" << vpp;
  if (pp > 1) o << " " << pipeline::ScheduleKindName(schedule);
  o << " m" << micro_batches << " zero" << zero << " rc=" << RecomputeName(recompute);
  return o.str();
}

TrainJob ApplyChoice(const TrainJob& job, const PlanChoice& c) {
  TrainJob j = job;
  ParallelOptions& p = j.parallel;
  p.dp = c.dp;
  p.tp = c.tp;
  p.pp = c.pp;
  p.vpp = c.vpp;
  p.schedule = std::string(pipeline::ScheduleKindName(c.schedule));
  p.micro_batches = 0;  // train.micro_batches says it (and the progress line counts it)
  p.zero = c.zero;
  p.recompute = c.recompute;
  p.partition = c.partition;
  p.sequence_parallel = false;
  j.train.micro_batches = c.micro_batches;
  j.train.batch_size = c.micro_batch * c.dp;
  return j;
}

std::vector<UnitSpec> ShardUnitsForTp(const ModelOptions& m, std::vector<UnitSpec> units, int tp) {
  if (tp <= 1) return units;
  if (m.kind == ModelOptions::Kind::kGpt) {
    const int64_t c = m.width, n = tp;
    for (size_t u = 0; u < units.size(); ++u) {
      if (u == 0) {
        units[u].params = m.vocab / n * c + m.context * c;
      } else if (u + 1 == units.size()) {
        units[u].params = 2 * c + c * m.vocab / n;
      } else {
        units[u].params = (12 * c * c + 7 * c) / n + 6 * c;
      }
    }
    return units;
  }
  for (UnitSpec& u : units) u.params /= tp;
  return units;
}

Result<std::vector<PlanChoice>> EnumeratePlans(const TrainJob& job, const PlannerOptions& o) {
  if (o.world < 1) return Status::InvalidArgument("planner: world " + std::to_string(o.world) + " must be >= 1");
  if (o.global_batch < 1) {
    return Status::InvalidArgument("planner: the global batch (train.batch_size x micro-batches) is " +
                                   std::to_string(o.global_batch) + "; it must be >= 1");
  }
  if (o.world > 1 && job.sync.mode != SyncOptions::Mode::kAllReduce) {
    return Status::InvalidArgument("sync.mode: the planner places " + std::to_string(o.world) +
                                   " trainers with data, tensor and pipeline parallelism, which needs sync.mode allreduce");
  }
  if (job.model.kind == ModelOptions::Kind::kCtr && o.world > 1) {
    return Status::InvalidArgument("model.kind ctr: no tensor or pipeline split; the planner has nothing to choose");
  }
  const bool gpt = job.model.kind == ModelOptions::Kind::kGpt;
  std::vector<PlanChoice> out;
  for (int tp = 1; tp <= o.world; ++tp) {
    for (int pp = 1; pp * tp <= o.world; ++pp) {
      if (o.world % (tp * pp) != 0) continue;
      const int dp = o.world / (tp * pp);
      // (schedule, vpp) pairs: one for pp 1, every schedule for pp > 1.
      std::vector<std::pair<ScheduleKind, int>> scheds = {{ScheduleKind::k1F1B, 1}};
      if (pp > 1) {
        scheds = {{ScheduleKind::kGpipe, 1}, {ScheduleKind::k1F1B, 1}, {ScheduleKind::kInterleaved, 2},
                  {ScheduleKind::kZbH1, 1}, {ScheduleKind::kZbv, 2}};
      }
      for (int m = 1; m <= std::min<int64_t>(o.max_micro_batches, o.global_batch); ++m) {
        if (o.global_batch % m != 0 || (o.global_batch / m) % dp != 0) continue;
        for (const auto& [kind, vpp] : scheds) {
          for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero) {
            if (zero == 3 && (pp > 1 || kind == ScheduleKind::kZbH1 || kind == ScheduleKind::kZbv)) continue;
            for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
              if (rc == Recompute::kSelective && !gpt) continue;
              PlanChoice c;
              c.dp = dp;
              c.tp = tp;
              c.pp = pp;
              c.vpp = vpp;
              c.schedule = kind;
              c.micro_batches = m;
              c.zero = zero;
              c.recompute = rc;
              c.micro_batch = o.global_batch / m / dp;
              if (!ResolvePlan(ApplyChoice(job, c), o.world).ok()) continue;
              out.push_back(c);
            }
          }
        }
      }
    }
  }
  if (out.empty()) {
    return Status::InvalidArgument("planner: no plan of " + std::to_string(o.world) + " trainers runs this model with a global batch of " +
                                   std::to_string(o.global_batch) + " (train.batch_size x micro-batches)");
  }
  return out;
}

std::string PipelineKey(const PlanChoice& c) {
  // "units": replayed with the model's own compute (unit_replay.h); keys of the spins before it
  // no longer match.
  return c.ToString() + " mb" + std::to_string(c.micro_batch) + " cut=" + c.partition + " units";
}

std::vector<ProfileKey> NeededProfiles(const std::vector<PlanChoice>& choices) {
  std::set<ProfileKey> keys;
  for (const PlanChoice& c : choices) keys.insert({c.micro_batch, c.recompute});
  return {keys.begin(), keys.end()};
}

Result<RankedPlans> RankPlans(const TrainJob& job, const std::vector<PlanChoice>& choices, const Calibration& cal,
                              const CommCosts& comm, const PlannerOptions& o) {
  RankedPlans r;
  r.enumerated = static_cast<int>(choices.size());
  for (const PlanChoice& c : choices) {
    STRATA_ASSIGN_OR_RETURN(PlanPrediction p, Predict(job, c, cal, comm, o));
    if (!p.fits) {
      ++r.over_memory;
      continue;
    }
    r.plans.push_back(std::move(p));
  }
  std::stable_sort(r.plans.begin(), r.plans.end(), [](const PlanPrediction& a, const PlanPrediction& b) {
    if (a.step_s != b.step_s) return a.step_s < b.step_s;
    if (a.memory.total() != b.memory.total()) return a.memory.total() < b.memory.total();
    return a.choice.tp * a.choice.pp < b.choice.tp * b.choice.pp;
  });
  return r;
}

}  // namespace strata
