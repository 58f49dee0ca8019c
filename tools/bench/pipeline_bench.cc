// pipeline_bench.cc: strata-bench pipeline: runs a gpt job through strata-launch on real trainer
// processes (one per pipeline rank, shared memory between stages) for every (pp, micro-batches,
// schedule), reads each trainer's per-step pipeline timings back from its metrics file, and puts
// the measured bubble beside the simulator's bubble for the same step's measured F/B/I/W costs
// and the textbook formula; the peak saved activations per rank beside what the schedule's
// order implies for the model's per-stage activation sizes (measured in this process).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "tools/bench/bench.h"
#include "tools/bench/pipeline_timings.h"
#include "tools/job_config.h"
#include "trainer/models/model.h"
#include "trainer/parallel/plan.h"
#include "trainer/pipeline/measured.h"
#include "trainer/pipeline/schedules.h"
#include "trainer/pipeline/simulate.h"

namespace strata::bench {

namespace {

namespace fs = std::filesystem;
using pipeline::ScheduleKind;

struct Options {
  std::string pp = "2,4";
  std::string micro_batches = "4,8,16";
  std::string schedules = "gpipe,1f1b,interleaved,zb-h1,zbv";
  GptShape gpt{8, 128, 4, 64};
  int batch_size = 8;  // samples per micro-batch
  int steps = 12;
  int warmup = 2;  // first steps left out of every figure
  std::string data = "/usr/share/common-licenses/GPL-3";
  int timeout_s = 300;  // per job
  bool keep = false;    // keep the work directory (job file, metrics, launch logs)
};

// One pipeline rank's timings of one step (a line of its metrics file).
struct RankStep {
  double step_us = 0, busy_us = 0;
  int64_t peak_saved_bytes = 0;
  int peak_live = 0;
  std::vector<pipeline::TimedAction> actions;
};

// step -> pp rank -> timings, of data-parallel replica 0; steps missing a rank are left out.
using StepTable = std::map<int64_t, std::vector<RankStep>>;

// vpp 2 for the schedules that need virtual stages, 1 for the others.
int VppOf(ScheduleKind kind) {
  return kind == ScheduleKind::kInterleaved || kind == ScheduleKind::kZbv ? 2 : 1;
}

std::string JobYaml(const Options& o, const std::string& data_path) {
  std::ostringstream y;
  y << "model: " << o.gpt.ModelYaml() << "\n"
    << "data:\n  kind: text\n  path: " << data_path << "\n  eval_samples: 1024\n"
    << "optimizer:\n  kind: adamw\n  lr: 0.001\n"
    << "train:\n  steps: " << o.steps << "\n  batch_size: " << o.batch_size
    << "\n  log_every: " << o.steps << "\n  progress: false\n"
    << "sync:\n  mode: allreduce\n";
  return y.str();
}

// Reads m-<rank>.jsonl of trainers 0 .. pp-1 (dp is 1: trainer r is pipeline rank r).
Result<StepTable> ReadMetrics(const fs::path& dir, int pp) {
  std::map<int64_t, std::vector<RankStep>> steps;
  std::map<int64_t, int> seen;
  for (int r = 0; r < pp; ++r) {
    const fs::path path = dir / ("m-" + std::to_string(r) + ".jsonl");
    std::ifstream in(path);
    if (!in) return Status::NotFound("no metrics file " + path.string());
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.contains("pipeline")) continue;
      const auto& p = j["pipeline"];
      if (p.value("dp_rank", 0) != 0) continue;
      const int pp_rank = p.value("pp_rank", -1);
      if (pp_rank < 0 || pp_rank >= pp) return Status::Corruption(path.string() + ": bad pp_rank");
      RankStep s;
      s.step_us = p.value("step_us", 0.0);
      s.busy_us = p.value("busy_us", 0.0);
      s.peak_saved_bytes = p.value("peak_saved_bytes", int64_t{0});
      s.peak_live = p.value("peak_live", 0);
      for (const auto& a : p.at("actions")) {
        STRATA_ASSIGN_OR_RETURN(pipeline::Action action,
                                pipeline::ParseAction(a.at(0).get<std::string>()));
        s.actions.push_back({action, a.at(1).get<double>(), a.at(2).get<double>()});
      }
      const int64_t step = j.at("step").get<int64_t>();
      auto& ranks = steps[step];
      ranks.resize(pp);
      ranks[pp_rank] = std::move(s);
      ++seen[step];
    }
  }
  StepTable complete;
  for (auto& [step, ranks] : steps) {
    if (seen[step] == pp) complete[step] = std::move(ranks);
  }
  return complete;
}

// One micro-batch's saved bytes on each global stage: after its F, and after its I (split
// backward keeps only what W needs). Runs the job's model in this process on a real batch.
struct StageBytes {
  std::vector<int64_t> after_f, after_i;
};

Result<StageBytes> ProbeStageBytes(const TrainJob& job, const ParallelPlan& plan) {
  const ops::Exec exec = ops::Exec::Cpu();
  STRATA_ASSIGN_OR_RETURN(auto model, CreateModel(job.model, exec));
  STRATA_ASSIGN_OR_RETURN(auto data, CreateDataSource(job.data, job.model, job.train.batch_size));
  const Batch batch = model->ToDevice(data->Next());
  StageBytes bytes;
  Tensor x;
  const int stages = static_cast<int>(plan.stages.size());
  for (int s = 0; s < stages; ++s) {
    nn::Context ctx(exec, true, 1);
    Tensor out = model->ForwardUnits(plan.stages[s], batch, x, ctx);
    Tensor dy;
    if (s == stages - 1) {
      model->loss_head().Forward(out, batch.target, ctx, 1.0f / plan.micro_batches);
    } else {
      STRATA_ASSIGN_OR_RETURN(dy, Tensor::Zeros(out.shape(), out.dtype()));
    }
    bytes.after_f.push_back(ctx.saved_bytes());
    if (s == stages - 1) dy = model->loss_head().Backward(ctx);
    model->BackwardUnits(plan.stages[s], dy, ctx, BackwardPart::kInput);
    bytes.after_i.push_back(ctx.saved_bytes());
    model->BackwardWeightUnits(plan.stages[s], ctx);
    x = out;
  }
  return bytes;
}

// The most bytes rank `r`'s live contexts hold at once when it runs its actions in the
// simulator's order with `bytes` per stage (the executor's own accounting: an F adds its
// context, an I shrinks it, a B or W frees it).
int64_t TheoryPeakBytes(const std::vector<pipeline::TimedAction>& order, const StageBytes& bytes) {
  std::map<std::pair<int, int>, int64_t> live;
  int64_t now = 0, peak = 0;
  for (const pipeline::TimedAction& t : order) {
    const auto key = std::make_pair(t.action.stage, t.action.micro);
    switch (t.action.kind) {
      case pipeline::ActionKind::kForward:
        live[key] = bytes.after_f[t.action.stage];
        now += live[key];
        peak = std::max(peak, now);
        break;
      case pipeline::ActionKind::kBackwardInput:
        now += bytes.after_i[t.action.stage] - live[key];
        live[key] = bytes.after_i[t.action.stage];
        break;
      default:
        now -= live[key];
        live.erase(key);
        break;
    }
  }
  return peak;
}

// The figures of one configuration.
struct Figures {
  int pp = 0, m = 0, vpp = 1;
  ScheduleKind kind{};
  double measured = 0, unforced = 0, simulated = 0, sim_comm = 0, sim_each = 0, handoff_ms = 0, textbook = 0,
         step_ms = 0, spread = 0, load = 0;
  int steps = 0;
  // Per global stage, the median over steps of the stage's mean action time, in ms (B when
  // backward is fused; I and W when it is split).
  std::vector<double> f_ms, b_ms, i_ms, w_ms;
};

// zb-h1's simulated bubble over 1f1b's if every stage took the zb-h1 run's mean F, I and W
// (what the schedule gives without the stages' imbalance; the textbook's 1/3 needs F = I = W).
double BalancedZbH1Ratio(const Figures& zb) {
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / v.size();
  };
  pipeline::Costs c;
  c.f = mean(zb.f_ms), c.i = mean(zb.i_ms), c.w = mean(zb.w_ms), c.b = c.i + c.w;
  const pipeline::PipelineShape shape{zb.pp, 1, zb.m};
  auto zb_sim = pipeline::Simulate(ScheduleKind::kZbH1, shape, c);
  auto one_sim = pipeline::Simulate(ScheduleKind::k1F1B, shape, c);
  return zb_sim.ok() && one_sim.ok() && one_sim->bubble > 0 ? zb_sim->bubble / one_sim->bubble : 0;
}

Result<Report> RunPipelineBench(const Options& o) {
  std::vector<int> pps, ms;
  for (const std::string& s : SplitList(o.pp)) pps.push_back(std::atoi(s.c_str()));
  for (const std::string& s : SplitList(o.micro_batches)) ms.push_back(std::atoi(s.c_str()));
  std::vector<ScheduleKind> kinds;
  for (const std::string& s : SplitList(o.schedules)) {
    STRATA_ASSIGN_OR_RETURN(ScheduleKind k, pipeline::ParseScheduleKind(s));
    kinds.push_back(k);
  }
  if (pps.empty() || ms.empty() || kinds.empty()) {
    return Status::InvalidArgument("--pp, --micro-batches and --schedules must not be empty");
  }
  if (std::ranges::any_of(pps, [](int v) { return v < 2; })) {
    return Status::InvalidArgument("--pp: every entry must be >= 2");
  }
  if (std::ranges::any_of(ms, [](int v) { return v < 1; })) {
    return Status::InvalidArgument("--micro-batches: every entry must be >= 1");
  }
  if (o.steps <= o.warmup) return Status::InvalidArgument("--steps must exceed --warmup");

  STRATA_ASSIGN_OR_RETURN(JobWorkDir dir, MakeJobWorkDir("pipeline", o.data, [&](const std::string& data) {
                            return JobYaml(o, data);
                          }));
  const std::string& launch = dir.launch;
  const fs::path& work = dir.work;
  const std::string& data_path = dir.data_path;
  const fs::path& job_path = dir.job_path;

  Report report;
  Table bubbles(
      "strata-bench pipeline: measured bubble vs the simulator on the same measured costs",
      {{"pp", "pp", Table::Format::kInteger},
       {"m", "micro_batches", Table::Format::kInteger},
       {"schedule", "schedule", Table::Format::kText},
       {"vpp", "vpp", Table::Format::kInteger},
       {"measured", "measured_bubble", Table::Format::kFixed3},
       {"unforced", "unforced_idle", Table::Format::kFixed3},
       {"simulated", "simulated_bubble", Table::Format::kFixed3},
       {"meas/sim", "ratio", Table::Format::kFixed2},
       {"hand-off ms", "handoff_ms", Table::Format::kFixed2},
       {"sim+comm", "simulated_comm_bubble", Table::Format::kFixed3},
       {"sim each", "simulated_each_bubble", Table::Format::kFixed3},
       {"textbook", "textbook_bubble", Table::Format::kFixed3},
       {"step ms", "step_ms", Table::Format::kFixed1},
       {"steps", "steps", Table::Format::kInteger},
       {"action cv %", "action_cv_pct", Table::Format::kFixed1},
       {"load", "load_average", Table::Format::kFixed1},
       {"note", "note", Table::Format::kText}});
  Table memory("saved activations per pipeline rank: measured peak vs theory",
               {{"pp", "pp", Table::Format::kInteger},
                {"m", "micro_batches", Table::Format::kInteger},
                {"schedule", "schedule", Table::Format::kText},
                {"rank", "pp_rank", Table::Format::kInteger},
                {"peak saved", "peak_saved_bytes", Table::Format::kBytes},
                {"theory", "theory_bytes", Table::Format::kBytes},
                {"meas/theory", "ratio", Table::Format::kFixed2},
                {"live", "peak_live", Table::Format::kInteger},
                {"sim live", "sim_peak_live", Table::Format::kInteger}});
  Table stage_costs("measured action times per stage (ms, medians over steps)",
                    {{"pp", "pp", Table::Format::kInteger},
                     {"m", "micro_batches", Table::Format::kInteger},
                     {"schedule", "schedule", Table::Format::kText},
                     {"stage", "stage", Table::Format::kInteger},
                     {"F", "f_ms", Table::Format::kFixed2},
                     {"B", "b_ms", Table::Format::kFixed2},
                     {"I", "i_ms", Table::Format::kFixed2},
                     {"W", "w_ms", Table::Format::kFixed2}});
  std::vector<Figures> results;
  nlohmann::json details = nlohmann::json::array();
  const unsigned cpus = std::thread::hardware_concurrency();
  Stopwatch total;

  for (int pp : pps) {
    for (int m : ms) {
      for (ScheduleKind kind : kinds) {
        const int vpp = VppOf(kind);
        const pipeline::PipelineShape shape{pp, vpp, m};
        const std::string name(pipeline::ScheduleKindName(kind));
        if (Status s = pipeline::Validate(kind, shape); !s.ok()) {
          std::cerr << "pipeline: skipping pp " << pp << " m " << m << " " << name << ": "
                    << s.message() << "\n";
          continue;
        }
        const fs::path dir = work / (std::to_string(results.size()) + "-pp" + std::to_string(pp) +
                                     "-m" + std::to_string(m) + "-" + name);
        fs::create_directories(dir);
        const std::vector<std::string> sets = {
            "parallel.pp=" + std::to_string(pp), "parallel.vpp=" + std::to_string(vpp),
            "parallel.schedule=" + name, "train.micro_batches=" + std::to_string(m),
            "train.metrics_path=" + (dir / "m-{rank}.jsonl").string()};
        std::vector<std::string> args = {launch,
                                         "--servers",
                                         "0",
                                         "--trainers",
                                         std::to_string(pp),
                                         "--timeout",
                                         std::to_string(o.timeout_s),
                                         job_path.string()};
        for (const std::string& s : sets) {
          args.push_back("--set");
          args.push_back(s);
        }
        std::cerr << "pipeline: pp " << pp << " m " << m << " " << name << " ... " << std::flush;
        Stopwatch took;
        const std::string where =
            "pp " + std::to_string(pp) + " m " + std::to_string(m) + " " + name;
        STRATA_RETURN_IF_ERROR(LaunchJob(args, dir / "launch.log").WithContext(where));
        std::cerr << took.Seconds() << " s\n";
        STRATA_ASSIGN_OR_RETURN(StepTable steps, ReadMetrics(dir, pp));

        // The same job as the trainers read it: the plan's stages and each stage's activations.
        std::vector<std::string> overrides = sets;
        overrides.push_back("cluster.servers=0");
        overrides.push_back("cluster.trainers=" + std::to_string(pp));
        STRATA_ASSIGN_OR_RETURN(JobConfig job, LoadJobConfig(job_path.string(), overrides));
        STRATA_ASSIGN_OR_RETURN(ParallelPlan plan, ResolvePlan(job.trainer, pp));
        STRATA_ASSIGN_OR_RETURN(StageBytes stage_bytes, ProbeStageBytes(job.trainer, plan));
        STRATA_ASSIGN_OR_RETURN(pipeline::Simulation order, pipeline::Simulate(kind, shape, {}));

        Figures r;
        r.pp = pp, r.m = m, r.vpp = vpp, r.kind = kind;
        std::vector<double> measured, unforced, simulated, sim_comm, sim_each, handoff_ms, step_ms, spread;
        const int stages = shape.num_stages();
        std::vector<std::vector<double>> f_ms(stages), b_ms(stages), i_ms(stages), w_ms(stages);
        std::vector<int64_t> peak_saved(pp, 0);
        std::vector<int> peak_live(pp, 0);
        nlohmann::json per_step = nlohmann::json::array();
        for (const auto& [step, ranks] : steps) {
          if (step <= o.warmup) continue;
          double busy = 0, slowest = 0;
          std::vector<std::vector<pipeline::TimedAction>> actions;
          for (int k = 0; k < pp; ++k) {
            busy += ranks[k].busy_us;
            slowest = std::max(slowest, ranks[k].step_us);
            peak_saved[k] = std::max(peak_saved[k], ranks[k].peak_saved_bytes);
            peak_live[k] = std::max(peak_live[k], ranks[k].peak_live);
            actions.push_back(ranks[k].actions);
          }
          const pipeline::Costs costs = pipeline::MeasuredCosts(actions, stages);
          for (int st = 0; st < stages; ++st) {
            f_ms[st].push_back(costs.F(st) / 1e3), b_ms[st].push_back(costs.B(st) / 1e3);
            i_ms[st].push_back(costs.I(st) / 1e3), w_ms[st].push_back(costs.W(st) / 1e3);
          }
          STRATA_ASSIGN_OR_RETURN(pipeline::Simulation sim, pipeline::Simulate(kind, shape, costs));
          // The simulator's definition: idle over pp x the step's makespan. The ranks leave a step
          // together (the loss is summed over the pipeline at its end), so the slowest rank's
          // step is the makespan.
          measured.push_back(slowest > 0 ? 1 - busy / (pp * slowest) : 0);
          unforced.push_back(slowest > 0 ? UnforcedIdle(kind, shape, actions) / (pp * slowest) : 0);
          simulated.push_back(sim.bubble);
          pipeline::Costs with_comm = costs;
          with_comm.comm = HandoffLatency(actions);
          STRATA_ASSIGN_OR_RETURN(pipeline::Simulation sim2,
                                  pipeline::Simulate(kind, shape, with_comm));
          sim_comm.push_back(sim2.bubble);
          // Each action with its own measured duration, hand-offs as above.
          pipeline::Costs each = pipeline::ActionCosts(actions, shape.num_stages());
          each.comm = with_comm.comm;
          STRATA_ASSIGN_OR_RETURN(pipeline::Simulation sim3, pipeline::Simulate(kind, shape, each));
          sim_each.push_back(sim3.bubble);
          handoff_ms.push_back(with_comm.comm / 1e3);
          step_ms.push_back(slowest / 1e3);
          spread.push_back(ActionSpread(actions));
          per_step.push_back({{"step", step},
                              {"measured_bubble", measured.back()},
                              {"unforced_idle", unforced.back()},
                              {"simulated_bubble", sim.bubble},
                              {"simulated_comm_bubble", sim2.bubble},
                              {"simulated_each_bubble", sim3.bubble},
                              {"handoff_ms", handoff_ms.back()},
                              {"step_ms", step_ms.back()}});
        }
        if (measured.empty())
          return Status::Internal(where + ": no step after the warm-up in the metrics");
        r.measured = Median(measured);
        r.simulated = Median(simulated);
        r.unforced = Median(unforced);
        r.sim_comm = Median(sim_comm);
        r.sim_each = Median(sim_each);
        r.handoff_ms = Median(handoff_ms);
        r.textbook = pipeline::TextbookBubble(kind, shape);
        r.step_ms = Median(step_ms);
        r.steps = static_cast<int>(measured.size());
        r.spread = Median(spread);
        const bool split = kind == ScheduleKind::kZbH1 || kind == ScheduleKind::kZbv;
        for (int st = 0; st < stages; ++st) {
          r.f_ms.push_back(Median(f_ms[st])), r.b_ms.push_back(Median(b_ms[st]));
          r.i_ms.push_back(Median(i_ms[st])), r.w_ms.push_back(Median(w_ms[st]));
          stage_costs.AddRow({pp, m, name, st, r.f_ms.back(), r.b_ms.back(),
                              split ? nlohmann::json(r.i_ms.back()) : nlohmann::json(),
                              split ? nlohmann::json(r.w_ms.back()) : nlohmann::json()});
        }
        double load[3] = {0, 0, 0};
        getloadavg(load, 3);
        r.load = load[0];
        results.push_back(r);
        const bool oversubscribed = static_cast<unsigned>(pp) > cpus;
        bubbles.AddRow(
            {pp, m, name, vpp, r.measured, r.unforced, r.simulated,
             r.simulated > 0 ? nlohmann::json(r.measured / r.simulated) : nlohmann::json(),
             r.handoff_ms, r.sim_comm, r.sim_each, r.textbook, r.step_ms, r.steps, r.spread * 100, r.load,
             oversubscribed ? "oversubscribed: " + std::to_string(pp) + " ranks on " +
                                  std::to_string(cpus) + " cores"
                            : std::string()});
        nlohmann::json ranks_json = nlohmann::json::array();
        for (int k = 0; k < pp; ++k) {
          const int64_t theory = TheoryPeakBytes(order.ranks[k], stage_bytes);
          memory.AddRow({pp, m, name, k, peak_saved[k], theory,
                         theory > 0 ? nlohmann::json(static_cast<double>(peak_saved[k]) / theory)
                                    : nlohmann::json(),
                         peak_live[k], order.peak_live[k]});
          ranks_json.push_back(
              {{"pp_rank", k}, {"peak_saved_bytes", peak_saved[k]}, {"theory_bytes", theory}});
        }
        details.push_back({{"pp", pp},
                           {"micro_batches", m},
                           {"schedule", name},
                           {"steps", std::move(per_step)},
                           {"stage_bytes_after_f", stage_bytes.after_f},
                           {"stage_bytes_after_i", stage_bytes.after_i},
                           {"ranks", std::move(ranks_json)}});
      }
    }
  }

  // The goals, judged from the figures above (a benchmark reports; it does not assert).
  Table goals("goals (pp = 2)", {{"goal", "goal", Table::Format::kText},
                                 {"m", "micro_batches", Table::Format::kInteger},
                                 {"figures", "figures", Table::Format::kText},
                                 {"result", "result", Table::Format::kText},
                                 {"vs sim+comm", "result_comm", Table::Format::kText},
                                 {"vs sim each", "result_each", Table::Format::kText}});
  auto find = [&](int m, ScheduleKind k) -> const Figures* {
    for (const Figures& r : results) {
      if (r.pp == 2 && r.m == m && r.kind == k) return &r;
    }
    return nullptr;
  };
  auto fmt = [](const char* f, double a, double b, double c = 0, double d = 0, double e = 0) {
    char text[200];
    std::snprintf(text, sizeof(text), f, a, b, c, d, e);
    return std::string(text);
  };
  auto within = [](double measured, double simulated) {
    return simulated > 0 && std::abs(measured / simulated - 1) <= 0.10 ? "PASS" : "FAIL";
  };
  for (const Figures& r : results) {
    if (r.pp != 2) continue;
    goals.AddRow(
        {std::string(pipeline::ScheduleKindName(r.kind)) + ": measured within 10% of simulated",
         r.m, fmt("%.3f vs %.3f (with comm %.3f, each %.3f)", r.measured, r.simulated, r.sim_comm, r.sim_each),
         within(r.measured, r.simulated), within(r.measured, r.sim_comm), within(r.measured, r.sim_each)});
  }
  for (int m : ms) {
    const Figures* one = find(m, ScheduleKind::k1F1B);
    const Figures* zb = find(m, ScheduleKind::kZbH1);
    const Figures* il = find(m, ScheduleKind::kInterleaved);
    if (one && zb) {
      goals.AddRow({"zb-h1 bubble <= 1f1b's / 2", m,
                    fmt("%.3f vs %.3f / 2 (simulated %.3f vs %.3f / 2; balanced stages %.2f)", zb->measured,
                        one->measured, zb->simulated, one->simulated, BalancedZbH1Ratio(*zb)),
                    zb->measured <= one->measured / 2 ? "PASS" : "FAIL", nullptr, nullptr});
    }
    if (one && il) {
      goals.AddRow({"interleaved bubble < 1f1b's", m,
                    fmt("%.3f vs %.3f (simulated %.3f vs %.3f)", il->measured, one->measured,
                        il->simulated, one->simulated),
                    il->measured < one->measured ? "PASS" : "FAIL", nullptr, nullptr});
    }
  }

  report.tables.push_back(std::move(bubbles));
  report.tables.push_back(std::move(memory));
  report.tables.push_back(std::move(goals));
  report.tables.push_back(std::move(stage_costs));
  report.details = {{"configurations", std::move(details)}};
  report.config = {{"pp", pps},
                   {"micro_batches", ms},
                   {"schedules", SplitList(o.schedules)},
                   {"model", o.gpt.ToJson()},
                   {"batch_size", o.batch_size},
                   {"steps", o.steps},
                   {"warmup", o.warmup},
                   {"data", data_path},
                   {"cpus", cpus}};
  const std::string text = HostLoadNote(cpus, total.Seconds());
  report.notes = {
      "each configuration: strata-launch --servers 0 --trainers pp (dp 1) of a byte-level gpt, "
      "OPENBLAS_NUM_THREADS=1, hand-offs between stages through shared memory (parallel.shm_ring_mb; 0 for Gloo over loopback TCP); every trainer writes each step's pipeline "
      "timings (its executor's clock) to its metrics file. The first --warmup steps are left out; "
      "figures are medians over the other steps.",
      "measured bubble: per step 1 - sum_r busy_r / (pp x max_r step_r) over the pipeline ranks, "
      "the simulator's definition (busy: time in F/B/I/W; step: from the rank's start of the "
      "step to its last send's completion; the ranks leave a step together, at the loss's sum "
      "over the pipeline, so the slowest rank's step is the makespan). "
      "simulated: "
      "the simulator (Simulate) running the same schedule with that step's measured mean F/B/I/W "
      "time per stage and free communication; its bubble charges every rank up to the "
      "pipeline's makespan (Simulation::bubble). hand-off ms: one-way latency of an activation "
      "or gradient between neighbouring ranks, estimated from the same step (HandoffLatency: "
      "least producer-end to consumer-start gap each way, clock offsets cancelling); sim+comm: "
      "the simulator again with that latency on every hand-off. sim each: the simulator with that "
      "latency and every action's own measured duration in that step (ActionCosts) instead of its "
      "stage's mean: the mean hides the actions' spread, and a rank that waits on its neighbour "
      "waits for the slower of two jittered actions, which the means never are; what the measured "
      "bubble adds to it is the executor's own. unforced: the part of the "
      "measured bubble spent before actions whose inputs were already on the rank (an F of "
      "stage 0, the last stage's backward, every W, zbv's turn): executor overhead and time the "
      "OS gave the core to another thread or process, which no schedule causes. "
      "textbook: TextbookBubble (equal stages). step ms: "
      "the slowest rank's pipeline step (without the optimizer).",
      "theory (saved activations): one micro-batch's saved bytes on each stage, measured here by "
      "running the same model's stages on one batch (after F; after I for split backward), "
      "summed over the (stage, micro-batch) contexts the schedule keeps alive at once in the "
      "simulator's order; its peak per rank. live / sim live: most contexts alive at once, "
      "measured and simulated.",
      "action cv %: how much one kind of action on one stage varies within a step (coefficient "
      "of variation, averaged over kinds and stages; median over steps): a few percent on a quiet "
      "host; tens of percent mean the ranks were preempted, which the measured bubble counts "
      "as idle on the waiting rank and the simulator sees only as longer costs. load: the "
      "host's 1-minute load average when the configuration finished.",
      "pp above the host's cores: the ranks share cores, so waits and compute interleave with "
      "the other ranks' compute and busy time includes time preempted: not a pipeline figure.",
      text};
  FinishWorkDir(work, o.keep, &report.notes);
  return report;
}

}  // namespace

BenchFn SetupPipelineBench(CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--pp", o->pp, "pipeline ranks, comma-separated")->capture_default_str();
  app.add_option("--micro-batches", o->micro_batches, "micro-batches per step, comma-separated")
      ->capture_default_str();
  app.add_option("--schedules", o->schedules,
                 "gpipe, 1f1b, interleaved (vpp 2), zb-h1, zbv (vpp 2)")
      ->capture_default_str();
  AddGptShapeOptions(app, o->gpt);
  app.add_option("--batch-size", o->batch_size, "samples per micro-batch")->capture_default_str();
  app.add_option("--steps", o->steps, "training steps per configuration")->capture_default_str();
  app.add_option("--warmup", o->warmup, "first steps left out")->capture_default_str();
  app.add_option("--data", o->data, "text file to train on (a generated one when missing)")
      ->capture_default_str();
  app.add_option("--timeout", o->timeout_s, "limit on each job, seconds")->capture_default_str();
  app.add_flag("--keep", o->keep, "keep the work directory (job, metrics, launch logs)");
  return [o] { return RunPipelineBench(*o); };
}

}  // namespace strata::bench
