// plan_main.cc: strata-plan, the planner's ranked table for a job (issue #19) and what a job's
// `auto` section derives:
//   strata-plan JOB [--trainers N] [--memory-mb M] [--cache F] [--json F] [--top K]
//   strata-plan --explain JOB [--set KEY=VALUE ...]
// The first calibrates this device (cached), measures collectives, enumerates every plan and
// prints them fastest first with predicted memory per device and step time in parts. --explain
// prints every tensor's placement (annotated, chosen by cost with each candidate's cost, or
// from its op's rule), every inserted collective with its bytes per micro-batch or per step,
// and the derived plan's bytes per step beside what the trainer's communication model
// (trainer/parallel/comm_model.h) counts for the hand-written plan it maps onto.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "common/logging.h"
#include "tools/job_config.h"
#include "trainer/auto/auto_plan.h"
#include "trainer/auto/auto_select.h"
#include "trainer/auto/device_model.h"
#include "trainer/device.h"
#include "trainer/ops/parallel.h"
#include "trainer/parallel/comm_model.h"
#include "trainer/parallel/plan.h"

namespace strata {
namespace {

constexpr int kBadInput = 2;

// The hand-written plan's traffic on rank 0, from the trainer's communication model. Its unit
// specs are rank 0's shard: gpt.cc's split (1/tp of every block but the norms and the row
// layers' biases, of the token table and of the head).
Result<CommModel> HandWritten(const TrainJob& job, const AutoPlan& plan) {
  STRATA_ASSIGN_OR_RETURN(ParallelPlan pp, ResolvePlan(job, plan.dp * plan.tp * plan.pp));
  STRATA_ASSIGN_OR_RETURN(std::vector<UnitSpec> units, ModelUnits(job.model));
  const ModelOptions& m = job.model;
  if (m.kind == ModelOptions::Kind::kGpt) units = ShardUnitsForTp(m, units, plan.tp);
  CommLayout l;
  l.plan = pp;
  l.units = units;
  const int64_t local = job.train.batch_size / plan.dp;
  l.micro_batch = m.kind == ModelOptions::Kind::kGpt ? Shape{local, m.context} : Shape{local};
  l.model = m;
  l.recompute = job.parallel.recompute;
  l.dp_all_reduce = plan.dp > 1;
  l.overlap = false;  // the first step's bucket order: once, not per step
  return ModelCommTraffic(l);
}

int Explain(const TrainJob& job) {
  Result<AutoPlan> plan = DeriveAutoPlan(job);
  if (!plan.ok()) {
    std::cerr << "strata-plan: " << plan.status().ToString() << "\n";
    return kBadInput;
  }
  for (const std::string& line : plan->Explain()) {
    std::cout << (line.rfind("auto: ", 0) == 0 ? line.substr(6) : line) << "\n";
  }
  if (plan->propagation) {
    std::cout << fmt::format("collectives' cost per step: {:.3f} ms (LinkCosts: 50 us + bytes / 2 GB/s, ring wire bytes)\n",
                             plan->propagation->cost_s * 1e3);
  }
  Result<CommModel> hand = HandWritten(job, *plan);
  if (!hand.ok()) {
    std::cerr << "strata-plan: the hand-written plan: " << hand.status().ToString() << "\n";
    return kBadInput;
  }
  const ParallelOptions& p = job.parallel;
  const int64_t m = p.micro_batches ? p.micro_batches : job.train.micro_batches;
  std::cout << fmt::format(
      "\nrank 0, bytes per step ({} micro-batch{}): derived from placements beside the trainer's "
      "communication model of parallel.dp {} x tp {} x pp {}\n",
      m, m == 1 ? "" : "es", plan->dp, plan->tp, plan->pp);
  std::cout << fmt::format("  {:<6} {:<16} {:>14} {:>14}\n", "group", "op", "derived", "hand-written");
  bool all_equal = true;
  auto row = [&](const char* group, const GroupTraffic& g, CommOp op, uint64_t derived) {
    const uint64_t model = g.per_step[static_cast<size_t>(op)];
    if (model == 0 && derived == 0) return;
    const bool placed = op != CommOp::kHostAllReduce && op != CommOp::kHostBroadcast;
    if (placed) all_equal = all_equal && model == derived;
    std::cout << fmt::format("  {:<6} {:<16} {:>14} {:>14}{}\n", group, CommOpName(op),
                             placed ? std::to_string(derived) : std::string("-"), model,
                             placed ? (model == derived ? "  equal" : "  DIFFERENT")
                                    : "  (scalars: loss, gradient norm; no placement moves them)");
  };
  auto derived = [&](const std::map<std::string, uint64_t>& bytes, CommOp op, int64_t times) {
    auto it = bytes.find(std::string(CommOpName(op)));
    return it == bytes.end() ? uint64_t{0} : it->second * static_cast<uint64_t>(times);
  };
  for (CommOp op : {CommOp::kAllReduce, CommOp::kAllGather, CommOp::kReduceScatter,
                    CommOp::kAllToAll, CommOp::kHostAllReduce}) {
    row("tp", hand->tp, op, plan->tp > 1 ? derived(plan->per_micro_batch, op, m) : 0);
  }
  for (CommOp op : {CommOp::kAllReduce, CommOp::kAllGather, CommOp::kReduceScatter,
                    CommOp::kHostAllReduce}) {
    row("dp", hand->dp, op, plan->dp > 1 ? derived(plan->per_step, op, 1) : 0);
  }
  for (CommOp op : {CommOp::kSend, CommOp::kRecv, CommOp::kHostAllReduce}) {
    row("pp", hand->pp, op, plan->pp > 1 ? derived(plan->per_micro_batch, op, m) : 0);
  }
  std::cout << (all_equal ? "every collective from placements equals the hand-written plan's\n"
                          : "the derived collectives DIFFER from the hand-written plan's\n");
  return all_equal ? 0 : 1;
}

struct RankFlags {
  int trainers = 0;        // 0: cluster.trainers
  int64_t memory_mb = -1;  // -1: train.memory_limit_mb
  int64_t global_batch = 0;
  int cores = 0;
  int top = 10;
  std::string cache, json, host;
  std::string device_model;  // a stated device (device_model.h) instead of this one, measured
  std::vector<std::string> only;  // --only: these plans alone (PlanRequest::only)
};

Status WriteJson(const std::string& path, const RankedPlans& ranked, const PlannerOptions& o) {
  if (path.empty()) return Status::OK();
  std::ofstream out(path);
  out << RankedToJson(ranked, o) << "\n";
  return out ? Status::OK() : Status::IOError("cannot write " + path);
}

// The plans for a device no machine here has: its costs come from the device file and the
// model's shapes, not from a calibration run (trainer/auto/device_model.h).
int RankStated(const JobConfig& config, const RankFlags& f) {
  const TrainJob& job = config.trainer;
  Result<DeviceModel> device = LoadDeviceModel(f.device_model);
  if (!device.ok()) {
    std::cerr << "strata-plan: --device-model: " << device.status().ToString() << "\n";
    return kBadInput;
  }
  PlannerOptions o;
  o.world = f.trainers > 0 ? f.trainers : static_cast<int>(config.cluster.trainers);
  o.global_batch = f.global_batch > 0 ? f.global_batch : GlobalBatch(job);
  o.memory_limit_bytes = f.memory_mb >= 0 ? (f.memory_mb << 20) : device->usable_bytes();
  o.overlap = job.sync.overlap;
  o.value_bytes = 2;
  o.mixed_precision = true;
  Result<std::vector<PlanChoice>> choices = EnumeratePlans(job, o);
  Result<Calibration> cal = choices.ok() ? StatedCalibration(job, *device, NeededProfiles(*choices))
                                         : Result<Calibration>(choices.status());
  Result<RankedPlans> ranked =
      cal.ok() ? RankPlans(job, *choices, *cal, StatedCommCosts(*device), o) : Result<RankedPlans>(cal.status());
  if (!ranked.ok()) {
    std::cerr << "strata-plan: " << ranked.status().ToString() << "\n";
    return kBadInput;
  }
  int64_t params = 0;
  if (Result<std::vector<UnitSpec>> units = ModelUnits(job.model); units.ok()) {
    for (const UnitSpec& u : *units) params += u.params;
  }
  std::cout << fmt::format(
      "{:.2f} B parameters on {} x {} ({} per node), global batch {} x {} tokens, {:.1f} GiB usable per device; "
      "bf16 compute, fp32 gradients and master weights; costs stated in {}, not measured\n",
      params / 1e9, o.world, device->name, device->ranks_per_node, o.global_batch, job.model.context,
      o.memory_limit_bytes / double(1 << 30), f.device_model);
  std::cout << fmt::format("{} plans valid, {} over the memory budget, {} ranked; the top {}:\n", ranked->enumerated,
                           ranked->over_memory, ranked->plans.size(), std::min<size_t>(f.top, ranked->plans.size()));
  for (const std::string& line : PlanTable(*ranked, f.top)) std::cout << line << "\n";
  if (ranked->plans.empty()) {
    std::cerr << "strata-plan: no plan fits the device's memory\n";
    return 1;
  }
  if (Status s = WriteJson(f.json, *ranked, o); !s.ok()) {
    std::cerr << "strata-plan: " << s.ToString() << "\n";
    return 1;
  }
  return 0;
}

int Rank(const JobConfig& config, const RankFlags& f) {
  const TrainJob& job = config.trainer;
  PlanRequest req;
  req.planner.world = f.trainers > 0 ? f.trainers : static_cast<int>(config.cluster.trainers);
  req.planner.global_batch = f.global_batch > 0 ? f.global_batch : GlobalBatch(job);
  const int64_t mb = f.memory_mb >= 0 ? f.memory_mb : job.train.memory_limit_mb;
  req.planner.memory_limit_bytes = mb << 20;
  req.planner.cores = f.cores;
  req.planner.overlap = job.sync.overlap;
  req.cache_path = f.cache;
  req.device = job.train.device;
  req.host = f.host;
  req.only = f.only;
  req.log = [](const std::string& s) { std::cerr << "strata-plan: " << s << "\n"; };
  // The in-process scheduler and nodes of the collective measurement would log their joins.
  spdlog::set_level(spdlog::level::warn);
  Result<std::unique_ptr<ComputeDevice>> device = ComputeDevice::Open(job.train.device, false, 0);
  if (!device.ok()) {
    std::cerr << "strata-plan: train.device: " << device.status().ToString() << "\n";
    return kBadInput;
  }
  Result<RankedPlans> ranked = PlanJob(job, (*device)->exec(), req);
  if (!ranked.ok()) {
    std::cerr << "strata-plan: " << ranked.status().ToString() << "\n";
    return kBadInput;
  }
  const PlannerOptions& o = req.planner;
  std::cout << fmt::format(
      "{} trainers, global batch {}, memory per device {}, {} cores{}; calibration cache {}\n", o.world,
      o.global_batch, mb > 0 ? std::to_string(mb) + " MiB" : std::string("unlimited"), o.cores,
      o.cores > 0 && o.world > o.cores ? fmt::format(" (oversubscribed: compute x {:.2f})", double(o.world) / o.cores) : "",
      f.cache.empty() ? "none" : f.cache);
  std::cout << fmt::format("{} plans valid, {} over the memory budget, {} ranked; the top {}:\n", ranked->enumerated,
                           ranked->over_memory, ranked->plans.size(), std::min<size_t>(f.top, ranked->plans.size()));
  for (const std::string& line : PlanTable(*ranked, f.top)) std::cout << line << "\n";
  if (ranked->plans.empty()) {
    std::cerr << "strata-plan: no plan fits " << mb << " MiB per device (train.memory_limit_mb / --memory-mb)\n";
    return 1;
  }
  if (Status s = WriteJson(f.json, *ranked, o); !s.ok()) {
    std::cerr << "strata-plan: " << s.ToString() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  using namespace strata;
  CLI::App app{"strata-plan: the planner's ranked plans for a job, or (--explain) what its auto section derives"};
  std::string job_path;
  std::vector<std::string> overrides;
  bool explain = false;
  app.add_option("job", job_path, "job file (YAML) with an auto section")->required()->check(CLI::ExistingFile);
  app.add_option("--set", overrides, "override a job field, e.g. --set auto.mesh=x=4")->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  app.add_flag("--explain", explain,
               "print each tensor's derived placement and each inserted collective with its bytes");
  RankFlags rank;
  app.add_option("--trainers", rank.trainers, "world size to plan for (default: cluster.trainers)");
  app.add_option("--memory-mb", rank.memory_mb, "memory per device in MiB (default: train.memory_limit_mb; 0: no budget)");
  app.add_option("--global-batch", rank.global_batch,
                 "samples a step (default: train.batch_size x micro-batches)");
  app.add_option("--cores", rank.cores, "CPU cores the trainers share (default: this host's)");
  app.add_option("--cache", rank.cache, "calibration cache (default: ~/.cache/strata/plan_calibration.json)");
  app.add_option("--json", rank.json, "write every ranked plan as JSON");
  app.add_option("--only", rank.only,
                 "rank just this plan, by its label (\"dp2 tp1 pp2 1f1b m4 zero1 rc=none\"); repeat for more")
      ->allow_extra_args(false);
  app.add_option("--top", rank.top, "rows of the table")->check(CLI::PositiveNumber);
  app.add_option("--device-model", rank.device_model,
                 "plan for a stated device (YAML: peak FLOP/s, memory, links; examples/auto/h100_dgx.yaml) "
                 "instead of calibrating this one")
      ->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);
  Result<JobConfig> job = LoadJobConfig(job_path, overrides);
  if (!job.ok()) {
    std::cerr << "strata-plan: " << job.status().ToString() << "\n";
    return kBadInput;
  }
  if (!explain && !rank.device_model.empty()) return RankStated(*job, rank);
  if (!explain) {
    if (rank.cores <= 0) rank.cores = static_cast<int>(std::thread::hardware_concurrency());
    // The calibration runs on each trainer's share of the cores, as strata-launch gives it
    // (OPENBLAS_NUM_THREADS = cores / trainers), unless the environment already says.
    if (!std::getenv("OPENBLAS_NUM_THREADS")) {
      const int world = rank.trainers > 0 ? rank.trainers : static_cast<int>(job->cluster.trainers);
      const int threads = std::max(1, rank.cores / std::max(1, world));
      setenv("OPENBLAS_NUM_THREADS", std::to_string(threads).c_str(), 1);
      ops::SetBlasThreads(threads);
    }
    if (rank.cache.empty()) {
      const char* home = std::getenv("HOME");  // main() is where the environment is read
      if (home) rank.cache = std::string(home) + "/.cache/strata/plan_calibration.json";
    }
    char host[256] = {};
    rank.host = gethostname(host, sizeof(host) - 1) == 0 ? host : "localhost";
    return Rank(*job, rank);
  }
  if (!job->trainer.auto_parallel.enabled()) {
    std::cerr << "strata-plan: " << job_path << " has no auto section (auto.mesh is empty)\n";
    return kBadInput;
  }
  return Explain(job->trainer);
}
