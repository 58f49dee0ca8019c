// auto_select.cc: PlanJob, the plan table and the JSON forms of a choice and a ranking.
#include "trainer/auto/auto_select.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "trainer/auto/unit_replay.h"
#include "trainer/device.h"
#include "trainer/ops/parallel.h"
#include "trainer/parallel/plan.h"

namespace strata {
namespace {

double Mib(int64_t b) { return static_cast<double>(b) / (1 << 20); }

nlohmann::json ChoiceJson(const PlanChoice& c) {
  return {{"dp", c.dp}, {"tp", c.tp}, {"pp", c.pp}, {"vpp", c.vpp},
          {"schedule", pipeline::ScheduleKindName(c.schedule)}, {"micro_batches", c.micro_batches},
          {"zero", c.zero}, {"recompute", RecomputeName(c.recompute)}, {"micro_batch", c.micro_batch},
          {"partition", c.partition}};
}

}  // namespace

int64_t GlobalBatch(const TrainJob& job) {
  const int64_t m = job.parallel.micro_batches ? job.parallel.micro_batches : job.train.micro_batches;
  return job.train.batch_size * m;
}

Result<RankedPlans> PlanJob(const TrainJob& job, const ops::Exec& exec, const PlanRequest& req) {
  auto log = [&](const std::string& s) {
    if (req.log) req.log(s);
  };
  PlannerOptions planner = req.planner;
  planner.replay_all = !exec.is_cuda();
  STRATA_ASSIGN_OR_RETURN(std::vector<PlanChoice> choices, EnumeratePlans(job, planner));
  if (!req.only.empty()) {
    std::vector<PlanChoice> kept;
    for (const std::string& label : req.only) {
      auto it = std::find_if(choices.begin(), choices.end(), [&](const PlanChoice& c) { return c.ToString() == label; });
      if (it == choices.end()) {
        return Status::InvalidArgument("plan \"" + label + "\" is none of the " + std::to_string(choices.size()) +
                                       " valid plans of " + std::to_string(req.planner.world) +
                                       " trainers for this job (e.g. \"" + choices.front().ToString() + "\")");
      }
      kept.push_back(*it);
    }
    choices = std::move(kept);
  }
  // Measured as the trainers will run: each with its compute threads, as many at once as keep
  // the cores busy.
  const int threads = ops::ParallelThreads();
  const int corun = CalibrationCorun(req.planner.world, req.planner.cores, req.device);
  const std::string key = CalibrationKey(job, req.device, threads, corun);
  // The all-reduce's bandwidth point: every gradient, fp32, as a ZeRO-0 data-parallel sync moves it.
  int64_t grad_bytes = 0;
  {
    STRATA_ASSIGN_OR_RETURN(std::vector<UnitSpec> units, ModelUnits(job.model));
    for (const UnitSpec& u : units) grad_bytes += 4 * u.params;
  }
  const std::string comm_key = CommCostsKey(req.host, req.planner.world, grad_bytes);
  Calibration cal;
  cal.key = key;
  CommCosts comm;
  if (!req.cache_path.empty()) {
    STRATA_ASSIGN_OR_RETURN(cal, LoadCalibration(req.cache_path, key));
    STRATA_ASSIGN_OR_RETURN(comm, LoadCommCosts(req.cache_path, comm_key));
  }
  cal.corun = corun;
  const std::vector<ProfileKey> needed = NeededProfiles(choices);
  int missing = 0;
  for (const ProfileKey& k : needed) missing += cal.units.count(k) ? 0 : 1;
  if (missing > 0 || cal.optimizer_s_per_param <= 0) {
    log(fmt::format("calibrating {} (micro-batch, recompute) profiles of every unit on {}, {} thread{} each, {} "
                    "cop{} at once",
                    missing, req.device, threads, threads == 1 ? "" : "s", corun, corun == 1 ? "y" : "ies"));
    STRATA_RETURN_IF_ERROR(Calibrate(job, exec, needed, cal));
  }
  std::set<int> sizes;
  for (const PlanChoice& c : choices) {
    for (int n : {c.dp, c.tp}) {
      if (n > 1) sizes.insert(n);
    }
  }
  bool comm_missing = comm.p2p.latency_s <= 0 && comm.p2p.s_per_byte <= 0;
  for (int n : sizes) comm_missing = comm_missing || !comm.all_reduce.count(n);
  if (comm_missing && req.planner.world > 1) {
    log(fmt::format("measuring collectives on in-process Gloo communicators (group sizes {}; {} ranks at once, "
                    "as the job's groups)",
                    fmt::join(sizes, ", "), req.planner.world));
    STRATA_ASSIGN_OR_RETURN(comm, MeasureCommCosts({sizes.begin(), sizes.end()}, req.planner.world, grad_bytes));
  }
  // Plans whose ranks outnumber the cores, and on the CPU every plan of more than one rank: each
  // fitting plan's step (once per PipelineKey) replayed on this host's cores, as the job's
  // processes will share them.
  std::vector<PipelineReplayRequest> replays;
  std::vector<std::string> replay_keys;
  for (const PlanChoice& c : choices) {
    STRATA_ASSIGN_OR_RETURN(PlanPrediction p, Predict(job, c, cal, comm, planner));
    if (!p.fits || !p.replay) continue;
    if (std::find(replay_keys.begin(), replay_keys.end(), p.pipeline_key) != replay_keys.end()) continue;
    replay_keys.push_back(p.pipeline_key);
    replays.push_back(*p.replay);
    // The model's own compute, not spins of its calibrated parts (unit_replay.h says why).
    if (!exec.is_cuda()) {
      STRATA_ASSIGN_OR_RETURN(replays.back().work, UnitReplayWork(job, exec, p.choice, req.planner.world));
    }
  }
  if (!replays.empty()) {
    log(fmt::format("replaying {} plan{} with the model's own compute on this host's {} cores, 3 passes ({} "
                    "trainers{}; a step costs more than its calibrated units add up to)",
                    replays.size(), replays.size() == 1 ? "" : "s", req.planner.cores, req.planner.world,
                    req.planner.cores > 0 && req.planner.world > req.planner.cores
                        ? ": more processes than cores, which the simulator's processor sharing does not model"
                        : ""));
    const uint64_t ring = static_cast<uint64_t>(job.parallel.shm_ring_mb * (1 << 20));
    STRATA_ASSIGN_OR_RETURN(std::vector<double> seconds, ReplayPipelines(replays, ring));
    for (size_t i = 0; i < replays.size(); ++i) cal.pipeline_s[replay_keys[i]] = seconds[i];
  }
  if (!req.cache_path.empty()) {
    STRATA_RETURN_IF_ERROR(SaveCalibration(req.cache_path, cal));
    if (req.planner.world > 1) STRATA_RETURN_IF_ERROR(SaveCommCosts(req.cache_path, comm_key, comm));
  }
  return RankPlans(job, choices, cal, comm, planner);
}

std::vector<std::string> PlanTable(const RankedPlans& r, int top) {
  std::vector<std::string> out;
  out.push_back(fmt::format("{:>4}  {:<40} {:>9} {:>8} {:>8} {:>8} {:>8}  {:>9} {:>9} {:>8} {:>8}", "rank", "plan",
                            "mem MiB", "params", "grads", "optim", "activ", "step ms", "compute", "bubble", "comm"));
  for (int i = 0; i < std::min<int>(top, static_cast<int>(r.plans.size())); ++i) {
    const PlanPrediction& p = r.plans[i];
    const PlanMemory& m = p.memory;
    out.push_back(fmt::format("{:>4}  {:<40} {:>9.2f} {:>8.2f} {:>8.2f} {:>8.2f} {:>8.2f}  {:>9.2f} {:>9.2f} {:>8.2f} {:>8.2f}",
                              i + 1, p.choice.ToString(), Mib(m.total()), Mib(m.params), Mib(m.grads), Mib(m.optimizer),
                              Mib(m.activations + m.transient), p.step_s * 1e3, p.compute_s * 1e3, p.bubble_s * 1e3,
                              p.comm_s * 1e3));
  }
  return out;
}

std::string ChoiceToJson(const PlanChoice& c) { return ChoiceJson(c).dump(); }

Result<PlanChoice> ChoiceFromJson(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::InvalidArgument("plan choice: not a JSON object: " + text);
  PlanChoice c;
  std::string field;
  try {
    field = "dp";
    c.dp = j.at(field).get<int>();
    field = "tp";
    c.tp = j.at(field).get<int>();
    field = "pp";
    c.pp = j.at(field).get<int>();
    field = "vpp";
    c.vpp = j.at(field).get<int>();
    field = "schedule";
    STRATA_ASSIGN_OR_RETURN(c.schedule, pipeline::ParseScheduleKind(j.at(field).get<std::string>()));
    field = "micro_batches";
    c.micro_batches = j.at(field).get<int>();
    field = "zero";
    c.zero = j.at(field).get<int>();
    field = "recompute";
    const std::string rc = j.at(field).get<std::string>();
    if (rc == "none") {
      c.recompute = ParallelOptions::Recompute::kNone;
    } else if (rc == "selective") {
      c.recompute = ParallelOptions::Recompute::kSelective;
    } else if (rc == "full") {
      c.recompute = ParallelOptions::Recompute::kFull;
    } else {
      return Status::InvalidArgument("plan choice: recompute \"" + rc + "\" is not none, selective or full");
    }
    field = "micro_batch";
    c.micro_batch = j.at(field).get<int64_t>();
    field = "partition";
    c.partition = j.at(field).get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument("plan choice: field \"" + field + "\": " + e.what());
  }
  return c;
}

std::string RankedToJson(const RankedPlans& r, const PlannerOptions& o) {
  nlohmann::json plans = nlohmann::json::array();
  for (size_t i = 0; i < r.plans.size(); ++i) {
    const PlanPrediction& p = r.plans[i];
    nlohmann::json j = ChoiceJson(p.choice);
    j["rank"] = i + 1;
    j["plan"] = p.choice.ToString();
    j["memory_bytes"] = p.memory.total();
    j["memory"] = {{"params", p.memory.params}, {"grads", p.memory.grads}, {"optimizer", p.memory.optimizer},
                   {"activations", p.memory.activations}, {"transient", p.memory.transient}};
    j["step_ms"] = p.step_s * 1e3;
    j["compute_ms"] = p.compute_s * 1e3;
    j["optimizer_ms"] = p.optimizer_s * 1e3;
    j["bubble_ms"] = p.bubble_s * 1e3;
    j["comm_ms"] = p.comm_s * 1e3;
    plans.push_back(std::move(j));
  }
  return nlohmann::json{{"world", o.world},           {"global_batch", o.global_batch},
                        {"memory_limit_bytes", o.memory_limit_bytes}, {"cores", o.cores},
                        {"enumerated", r.enumerated}, {"over_memory", r.over_memory},
                        {"plans", plans}}
      .dump(1);
}

Result<TrainJob> SelectAutoPlan(const TrainJob& job, Node* node, const AutoSelectOptions& o,
                                std::vector<std::string>* why) {
  const std::string key = "parallel/auto_plan";
  const int rank = node ? node->rank() : 0;
  PlanChoice chosen;
  if (rank == 0) {
    PlanRequest req;
    req.planner.world = o.world;
    req.planner.global_batch = GlobalBatch(job);
    req.planner.memory_limit_bytes = job.train.memory_limit_mb << 20;
    req.planner.cores = o.cores;
    req.planner.overlap = job.sync.overlap;
    req.cache_path = job.parallel.auto_cache;
    req.device = job.train.device;
    req.host = o.host;
    req.log = [why](const std::string& s) { why->push_back("parallel.auto: " + s); };
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ComputeDevice> device,
                            ComputeDevice::Open(job.train.device, node != nullptr, 0, 0, job.train.local_task,
                                                job.train.Matmul(), job.train.Saved()));
    STRATA_ASSIGN_OR_RETURN(RankedPlans ranked, PlanJob(job, device->exec(), req));
    if (ranked.plans.empty()) {
      return Status::ResourceExhausted("parallel.auto: none of the " + std::to_string(ranked.enumerated) +
                                       " plans fits train.memory_limit_mb " +
                                       std::to_string(job.train.memory_limit_mb) + " MiB per device");
    }
    chosen = ranked.plans.front().choice;
    why->push_back(fmt::format("parallel.auto: {} plans of {} trainers for a global batch of {}, {} over memory; the top {}:",
                               ranked.enumerated, o.world, req.planner.global_batch, ranked.over_memory,
                               std::min<size_t>(3, ranked.plans.size())));
    for (const std::string& line : PlanTable(ranked, 3)) why->push_back("parallel.auto: " + line);
    const PlanPrediction& top = ranked.plans.front();
    why->push_back(fmt::format("parallel.auto: chose {} (predicted {:.2f} ms a step, {:.2f} MiB per device){}",
                               chosen.ToString(), top.step_s * 1e3, Mib(top.memory.total()),
                               ranked.plans.size() > 1
                                   ? fmt::format(": {:.1f}% faster than the next, {}",
                                                 100 * (ranked.plans[1].step_s / top.step_s - 1),
                                                 ranked.plans[1].choice.ToString())
                                   : std::string()));
    if (node) STRATA_RETURN_IF_ERROR(node->KvSet(key, ChoiceToJson(chosen)));
  } else {
    STRATA_ASSIGN_OR_RETURN(const std::string text, node->KvGet(key, o.timeout));
    STRATA_ASSIGN_OR_RETURN(chosen, ChoiceFromJson(text));
  }
  TrainJob out = ApplyChoice(job, chosen);
  out.parallel.auto_plan = false;
  return out;
}

}  // namespace strata
