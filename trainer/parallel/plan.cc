// plan.cc: ResolvePlan and the partitioners.
#include "trainer/parallel/plan.h"

#include <algorithm>
#include <sstream>

namespace strata {

std::string ParallelPlan::ToString() const {
  std::ostringstream o;
  o << "dp=" << dp;
  if (cp > 1) o << " cp=" << cp;
  o << " tp=" << tp << " pp=" << pp << " vpp=" << vpp << " m=" << micro_batches
    << " " << pipeline::ScheduleKindName(schedule) << "; stages";
  for (const UnitRange& r : stages) o << " [" << r.first << "," << r.last << ")";
  return o.str();
}

UnitSelection UnitsOfStages(const ParallelPlan& plan, const std::vector<int>& stages) {
  UnitSelection mine;
  if (plan.stages.size() <= 1) return mine;
  mine.assign(static_cast<size_t>(plan.stages.back().last), false);
  for (int s : stages) {
    for (int u = plan.stages[s].first; u < plan.stages[s].last; ++u) mine[u] = true;
  }
  return mine;
}

Result<std::unique_ptr<Model>> CreateRecomputingModel(ModelOptions options, ParallelOptions::Recompute rc,
                                                      const ops::Exec& exec, const UnitSelection& build,
                                                      nn::TpGroup tp, nn::CpGroup cp) {
  options.recompute_attention_core = rc == ParallelOptions::Recompute::kSelective;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, CreateModel(options, exec, build, tp, cp));
  if (rc == ParallelOptions::Recompute::kFull) {
    for (int u = 0; u < m->num_units(); ++u) {
      if (m->built(u)) m->unit(u).set_recompute(true);
    }
  }
  return m;
}

Result<std::vector<UnitRange>> BalancedPartition(const std::vector<double>& costs, int stages) {
  const int n = static_cast<int>(costs.size());
  if (stages < 1 || n < stages) {
    return Status::InvalidArgument("cannot cut " + std::to_string(n) + " units into " +
                                   std::to_string(stages) + " non-empty stages");
  }
  // best[s][i]: the smallest largest-stage cost of cutting units [0, i) into s stages.
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  const double inf = 1e300;
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s) {
    for (int i = s; i <= n - (stages - s); ++i) {
      for (int j = s - 1; j < i; ++j) {
        const double v = std::max(best[s - 1][j], prefix[i] - prefix[j]);
        if (v < best[s][i] * (1 - 1e-12)) {  // strictly better: ties keep the earliest cut
          best[s][i] = v;
          cut[s][i] = j;
        }
      }
    }
  }
  std::vector<UnitRange> out(stages);
  for (int s = stages, i = n; s >= 1; --s) {
    out[s - 1] = {cut[s][i], i};
    i = cut[s][i];
  }
  return out;
}

Result<std::vector<UnitRange>> ParsePartition(const std::string& text, int units, int stages) {
  std::vector<int> starts = {0};
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      starts.push_back(v);
    } catch (const std::exception&) {
      return Status::InvalidArgument("parallel.partition \"" + text + "\": \"" + item +
                                     "\" is not a unit index");
    }
  }
  if (static_cast<int>(starts.size()) != stages) {
    return Status::InvalidArgument("parallel.partition \"" + text + "\" gives " +
                                   std::to_string(starts.size()) + " stages; the plan has " +
                                   std::to_string(stages) + " (pp * vpp)");
  }
  std::vector<UnitRange> out;
  for (int s = 0; s < stages; ++s) {
    const int first = starts[s], last = s + 1 < stages ? starts[s + 1] : units;
    if (first >= last || first < 0 || last > units) {
      return Status::InvalidArgument("parallel.partition \"" + text + "\": stage " + std::to_string(s) +
                                     " would hold units [" + std::to_string(first) + ", " +
                                     std::to_string(last) + ") of the model's " +
                                     std::to_string(units) + " (cuts must increase within (0, " +
                                     std::to_string(units) + "))");
    }
    out.push_back({first, last});
  }
  return out;
}

Status CheckContextParallel(const TrainJob& job, int cp) {
  if (cp <= 1) return Status::OK();
  const ModelOptions& m = job.model;
  const std::string what = "parallel.cp " + std::to_string(cp);
  switch (m.kind) {
    case ModelOptions::Kind::kCtr:
      return Status::InvalidArgument(what + ": ctr's samples have no sequence to split (cp is for gpt and mlp)");
    case ModelOptions::Kind::kMlp:
      if (job.data.seq_len <= 0 || job.data.seq_len % cp != 0) {
        return Status::InvalidArgument(what + ": mlp splits each sample's tokens, so data.seq_len (" +
                                       std::to_string(job.data.seq_len) + ") must be a positive multiple of it");
      }
      break;
    case ModelOptions::Kind::kGpt: {
      // Ring attention's balanced split: 2 * cp chunks of every sequence (and a tp slice of
      // each rank's part under sequence parallelism).
      const int64_t split = 2 * cp * (job.parallel.sequence_parallel ? job.parallel.tp : 1);
      if (m.context % split != 0) {
        return Status::InvalidArgument(what + ": model.context " + std::to_string(m.context) +
                                       " must be divisible by 2 * cp" +
                                       (job.parallel.sequence_parallel ? " * tp" : "") + " = " + std::to_string(split) +
                                       " (each rank holds two equal chunks of every sequence)");
      }
      break;
    }
  }
  if (job.data.shard_axis != 0) {
    return Status::InvalidArgument(what + ": data.shard_axis " + std::to_string(job.data.shard_axis) +
                                   ": the models split a sample along its tokens only (axis 0)");
  }
  if (job.train.device != "cpu") {
    return Status::InvalidArgument(what + " with train.device " + job.train.device +
                                   ": ring attention runs on the CPU only so far (its CUDA kernels are not built)");
  }
  if (job.infer.enabled()) {
    return Status::InvalidArgument(what + ": inference does not split sequences (serve with cp 1)");
  }
  return Status::OK();
}

Result<ParallelPlan> ResolvePlan(const TrainJob& job, int world, const std::vector<double>& unit_costs) {
  const ParallelOptions& p = job.parallel;
  ParallelPlan plan;
  plan.world = world;
  plan.tp = static_cast<int>(p.tp);
  plan.pp = static_cast<int>(p.pp);
  plan.vpp = static_cast<int>(p.vpp);
  plan.cp = static_cast<int>(p.cp);
  const int fixed = plan.tp * plan.pp * plan.cp;
  const std::string fixed_names = plan.cp > 1 ? "parallel.tp * parallel.pp * parallel.cp" : "parallel.tp * parallel.pp";
  if (world % fixed != 0) {
    return Status::InvalidArgument("parallel: " + std::to_string(world) + " trainers are not a multiple of " +
                                   fixed_names + " = " + std::to_string(fixed));
  }
  plan.dp = p.dp ? static_cast<int>(p.dp) : world / fixed;
  if (plan.dp * fixed != world) {
    return Status::InvalidArgument("parallel: dp * tp * pp" + std::string(plan.cp > 1 ? " * cp" : "") + " = " +
                                   std::to_string(plan.dp) + " * " + std::to_string(plan.tp) + " * " +
                                   std::to_string(plan.pp) + (plan.cp > 1 ? " * " + std::to_string(plan.cp) : "") +
                                   " must equal the " + std::to_string(world) + " trainers");
  }
  STRATA_RETURN_IF_ERROR(CheckContextParallel(job, plan.cp));
  if (p.micro_batches != 0 && job.train.micro_batches != 1 && p.micro_batches != job.train.micro_batches) {
    return Status::InvalidArgument("parallel.micro_batches " + std::to_string(p.micro_batches) +
                                   " and train.micro_batches " + std::to_string(job.train.micro_batches) +
                                   " differ: they are the same setting, give one");
  }
  plan.micro_batches = static_cast<int>(p.micro_batches ? p.micro_batches : job.train.micro_batches);
  Result<pipeline::ScheduleKind> kind = pipeline::ParseScheduleKind(p.schedule);
  if (!kind.ok()) return kind.status().WithContext("parallel.schedule");
  plan.schedule = *kind;
  if (Status s = pipeline::Validate(plan.schedule, plan.shape()); !s.ok()) {
    return s.WithContext("parallel (schedule " + p.schedule + ", pp " + std::to_string(plan.pp) +
                         ", vpp " + std::to_string(plan.vpp) + ", micro_batches " +
                         std::to_string(plan.micro_batches) + ")");
  }
  if (plan.cp > 1) {
    // Megatron's order with cp between dp and tp: tp fastest, then cp, dp, pp.
    STRATA_ASSIGN_OR_RETURN(plan.mesh, ProcessMesh::Make({{"pp", plan.pp}, {"dp", plan.dp}, {"cp", plan.cp}, {"tp", plan.tp}}));
  } else {
    STRATA_ASSIGN_OR_RETURN(plan.mesh, ProcessMesh::Megatron(plan.pp, plan.dp, plan.tp));
  }
  STRATA_RETURN_IF_ERROR(CheckTensorParallel(job.model, plan.tp, p.sequence_parallel));

  STRATA_ASSIGN_OR_RETURN(std::vector<UnitSpec> units, ModelUnits(job.model));
  const int stages = plan.pp * plan.vpp;
  const int n = static_cast<int>(units.size());
  if (stages > 1 && n == 1) {
    return Status::InvalidArgument("parallel.pp: model.kind " + std::string(job.model.kind == ModelOptions::Kind::kCtr ? "ctr" : "") + " is one unit (it takes ids and dense features together) and does not pipeline");
  }
  if (stages > 1 && n < stages) {
    return Status::InvalidArgument(
        "parallel.pp * parallel.vpp = " + std::to_string(stages) + " stages, but the model has " +
        std::to_string(n) + " units" +
        (job.model.kind == ModelOptions::Kind::kGpt ? " (embedding, model.layers blocks, head): raise model.layers or lower pp/vpp" : ""));
  }
  if (p.partition == "params" || p.partition == "cost") {
    std::vector<double> costs;
    if (p.partition == "cost" && !unit_costs.empty()) {
      costs = unit_costs;
    } else {
      for (const UnitSpec& u : units) costs.push_back(static_cast<double>(u.params));
    }
    if (static_cast<int>(costs.size()) != n) return Status::Internal("unit costs do not match the units");
    STRATA_ASSIGN_OR_RETURN(plan.stages, BalancedPartition(costs, stages));
  } else {
    STRATA_ASSIGN_OR_RETURN(plan.stages, ParsePartition(p.partition, n, stages));
  }
  return plan;
}

}  // namespace strata
