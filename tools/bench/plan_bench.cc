// plan_bench.cc: strata-bench plan: the planner (issue #19) judged by running what it ranks.
// For gpt on 4 trainer processes and the seeds' mlp (1024 -> 4096 -> 1024) on 2, strata-plan
// ranks every plan (calibrating this machine, cached); the planner's top 3 and `--others` more
// plans spread over the rest of the ranking run through strata-launch for a warm-up (--warmup-s
// of steps by the prediction, 3 to --warmup steps) then --steps steps each, --rounds times
// (interleaved, the order reversed every other round). Each round first predicts its plans anew
// (strata-plan --only on them, with a calibration of its own), so that the host's drift over the
// run falls on the predictions as on the measurements; a plan's prediction is the median of its
// rounds' (--no-recalibrate: the ranking's alone).
// Per plan: predicted beside measured step time (median of the --steps steps after the warm-up,
// the slowest rank's, then of the rounds, with their spread; beside it the median of steps 3..20,
// what a 20-step run measures) and peak memory (the allocator's high-water mark, the largest
// rank's); per case: Spearman's rank correlation, the rounds'
// Spearman with each other (how well this host can rank the plans at all), the median absolute
// error, the chosen plan against the best measured one.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "tools/bench/bench.h"

namespace strata::bench {
namespace {

namespace fs = std::filesystem;

struct Options {
  int steps = 20;
  // Steps run before the measured ones: enough for about `warmup_s` (by the plan's predicted
  // step), at least 3 and at most `warmup`. On the 2-core host a pipeline's processes settle
  // only after some 0.4 s of steps (steps 3-30 of a gpt pp 4 job run 15-25% slower than steps
  // 40-60; one process alone does not), and the planner predicts the settled step.
  int warmup = 40;
  double warmup_s = 1.0;
  int others = 7;
  int rounds = 1;
  bool recalibrate = true;
  int timeout_s = 300;
  std::string cases = "gpt,mlp";
  std::string data = "/usr/share/common-licenses/GPL-3";
  bool keep = false;
};

struct Case {
  std::string name;
  int trainers;
  std::string yaml;
};

Case GptCase(const std::string& data) {
  return {"gpt", 4,
          "model: {kind: gpt, layers: 4, heads: 4, width: 64, context: 32, vocab: 256}\n"
          "data: {kind: text, path: " + data + ", eval_samples: 64}\n"
          "optimizer: {kind: adamw, lr: 0.001}\n"
          "train: {batch_size: 16, log_every: 1, progress: false}\n"
          "sync: {mode: allreduce}\n"};
}
Case MlpCase() {
  return {"mlp", 2,
          "model: {kind: mlp, mlp_in: 1024, mlp_hidden: 4096, mlp_out: 1024}\n"
          "data: {kind: regression, eval_samples: 64}\n"
          "optimizer: {kind: sgd, lr: 0.01}\n"
          "train: {batch_size: 32, log_every: 1, progress: false}\n"
          "sync: {mode: allreduce}\n"};
}

struct Measured {
  double step_ms = 0;   // median over the steps after `warmup`
  double early_ms = 0;  // median over steps 3..20 (the first 20 steps, the first two left out)
  int64_t peak_bytes = 0;
};

Result<Measured> ReadMeasured(const fs::path& dir, int trainers, int64_t batch_size, int warmup) {
  std::map<int64_t, double> slowest;
  Measured m;
  for (int r = 0; r < trainers; ++r) {
    std::ifstream in(dir / ("m-" + std::to_string(r) + ".jsonl"));
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_object()) continue;
      if (j.contains("samples_per_s") && j.contains("step")) {
        const double sps = j["samples_per_s"].get<double>();
        if (sps > 0) {
          double& s = slowest[j["step"].get<int64_t>()];
          s = std::max(s, 1e3 * static_cast<double>(batch_size) / sps);
        }
      }
      if (j.contains("memory")) m.peak_bytes = std::max(m.peak_bytes, j["memory"].value("step_peak_bytes", int64_t{0}));
    }
  }
  // Steps count from 1 in the metrics.
  std::vector<double> ms, early;
  for (const auto& [step, t] : slowest) {
    if (step > warmup && (warmup > 2 || step > 2)) ms.push_back(t);
    if (step > 2 && step <= 20) early.push_back(t);
  }
  if (ms.empty()) return Status::NotFound(dir.string() + ": no step records after step " + std::to_string(warmup));
  m.step_ms = Median(ms);
  m.early_ms = early.empty() ? 0 : Median(early);
  return m;
}

std::vector<double> Ranks(const std::vector<double>& v) {
  std::vector<size_t> idx(v.size());
  for (size_t i = 0; i < v.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = (static_cast<double>(i + j) / 2) + 1;
    i = j + 1;
  }
  return r;
}

double Spearman(const std::vector<double>& a, const std::vector<double>& b) {
  const std::vector<double> ra = Ranks(a), rb = Ranks(b);
  const double n = static_cast<double>(a.size());
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ma += ra[i] / n;
    mb += rb[i] / n;
  }
  double cov = 0, va = 0, vb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    cov += (ra[i] - ma) * (rb[i] - mb);
    va += (ra[i] - ma) * (ra[i] - ma);
    vb += (rb[i] - mb) * (rb[i] - mb);
  }
  return va > 0 && vb > 0 ? cov / std::sqrt(va * vb) : 0;
}

Result<Report> RunPlanBench(const Options& o) {
  const std::string bin = fs::canonical("/proc/self/exe").parent_path().string();
  const std::string launch = bin + "/strata-launch", plan = bin + "/strata-plan";
  for (const std::string& b : {launch, plan}) {
    if (!fs::exists(b)) return Status::NotFound(b + " (build it)");
  }
  char tmpl[] = "/tmp/strata-bench-plan-XXXXXX";
  if (!mkdtemp(tmpl)) return Status::IOError(std::string("mkdtemp: ") + std::strerror(errno));
  const fs::path work = tmpl;
  STRATA_ASSIGN_OR_RETURN(std::string data_path, TextDataPath(o.data, work));
  const unsigned cpus = std::thread::hardware_concurrency();
  Report report;
  report.benchmark = "plan";
  report.config = {{"steps", o.steps}, {"warmup", o.warmup}, {"warmup_s", o.warmup_s}, {"others", o.others}, {"rounds", o.rounds}, {"recalibrate", o.recalibrate}, {"cases", o.cases}, {"cpus", cpus}};
  Table table("strata-bench plan: the planner's predictions beside measured runs",
              {{"case", "case", Table::Format::kText},
               {"rank", "rank", Table::Format::kInteger},
               {"plan", "plan", Table::Format::kText},
               {"ranked ms", "ranked_ms", Table::Format::kFixed1},
               {"pred ms", "predicted_ms", Table::Format::kFixed1},
               {"meas ms", "measured_ms", Table::Format::kFixed1},
               {"steps 3-20 ms", "early_ms", Table::Format::kFixed1},
               {"spread %", "rounds_spread_pct", Table::Format::kFixed1},
               {"err %", "error_pct", Table::Format::kFixed1},
               {"pred MiB", "predicted_mib", Table::Format::kFixed2},
               {"meas MiB", "measured_mib", Table::Format::kFixed2},
               {"mem err %", "memory_error_pct", Table::Format::kFixed1}});
  Table summary("strata-bench plan: per case (goals: Spearman >= 0.8, median |error| <= 20%, chosen within 10% of the best, memory within 10%)",
                {{"case", "case", Table::Format::kText},
                 {"trainers", "trainers", Table::Format::kInteger},
                 {"plans run", "plans", Table::Format::kInteger},
                 {"Spearman", "spearman", Table::Format::kFixed3},
                 {"retest Spearman", "retest_spearman", Table::Format::kFixed3},
                 {"median |err| %", "median_abs_error_pct", Table::Format::kFixed1},
                 {"chosen ms", "chosen_ms", Table::Format::kFixed1},
                 {"best ms", "best_ms", Table::Format::kFixed1},
                 {"chosen/best", "chosen_over_best", Table::Format::kFixed3},
                 {"best plan", "best_plan", Table::Format::kText},
                 {"median |mem err| %", "median_abs_memory_error_pct", Table::Format::kFixed1}});
  Stopwatch total;
  for (const std::string& name : SplitList(o.cases)) {
    if (name != "gpt" && name != "mlp") return Status::InvalidArgument("--cases: \"" + name + "\" is not gpt or mlp");
    const Case c = name == "gpt" ? GptCase(data_path) : MlpCase();
    const fs::path dir = work / c.name;
    fs::create_directories(dir);
    const fs::path job = dir / "job.yaml";
    std::ofstream(job) << c.yaml;
    // strata-plan on this case with `cache`, plus `extra` arguments; its JSON ranking.
    auto run_planner = [&](const std::string& tag, const fs::path& cache,
                           const std::vector<std::string>& extra) -> Result<nlohmann::json> {
      const fs::path out = dir / (tag + ".json");
      std::vector<std::string> args = {plan, job.string(), "--trainers", std::to_string(c.trainers), "--cache",
                                       cache.string(), "--json", out.string()};
      args.insert(args.end(), extra.begin(), extra.end());
      STRATA_RETURN_IF_ERROR(LaunchJob(args, dir / (tag + ".log")).WithContext("strata-plan " + c.name + " (" + tag + ")"));
      std::ifstream in(out);
      nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
      if (!j.is_object() || !j.contains("plans")) return Status::Corruption(out.string() + ": not a strata-plan ranking");
      return j;
    };
    STRATA_ASSIGN_OR_RETURN(const nlohmann::json ranked, run_planner("plan", work / "calibration.json", {}));
    const nlohmann::json& plans = ranked.at("plans");
    // The top 3, then `others` spread evenly over the rest of the ranking.
    std::vector<size_t> pick;
    for (size_t i = 0; i < std::min<size_t>(3, plans.size()); ++i) pick.push_back(i);
    const size_t rest = plans.size() > 3 ? plans.size() - 3 : 0;
    for (int k = 0; k < o.others && rest > 0; ++k) {
      const size_t i = 3 + (rest - 1) * (k + 1) / o.others;
      if (std::find(pick.begin(), pick.end(), i) == pick.end()) pick.push_back(i);
    }
    // Every plan runs once per round; rounds alternate the order (so a drift of the host's load
    // falls on every plan alike), and a plan's figure is the median of its rounds.
    std::map<size_t, std::vector<Measured>> runs;   // plan index -> one per round
    std::map<size_t, std::vector<double>> predicted_ms;  // plan index -> one per round (or the ranking's)
    for (int round = 0; round < o.rounds; ++round) {
      std::vector<size_t> order = pick;
      if (round % 2 == 1) std::reverse(order.begin(), order.end());
      if (o.recalibrate) {
        const std::string tag = "round" + std::to_string(round + 1) + "-plan";
        std::vector<std::string> only;
        for (size_t i : pick) {
          only.push_back("--only");
          only.push_back(plans[i].at("plan").get<std::string>());
        }
        std::cerr << "plan: " << c.name << " round " << round + 1 << ": predicting its " << pick.size()
                  << " plans anew ... " << std::flush;
        Stopwatch took;
        STRATA_ASSIGN_OR_RETURN(const nlohmann::json again, run_planner(tag, dir / (tag + "-calibration.json"), only));
        std::cerr << took.Seconds() << " s\n";
        for (size_t i : pick) {
          const std::string label = plans[i].at("plan").get<std::string>();
          const nlohmann::json& ps = again.at("plans");
          auto it = std::find_if(ps.begin(), ps.end(), [&](const nlohmann::json& q) { return q.at("plan") == label; });
          if (it == ps.end()) return Status::Corruption(tag + ".json: strata-plan --only did not rank \"" + label + "\"");
          predicted_ms[i].push_back(it->at("step_ms").get<double>());
        }
      } else if (round == 0) {
        for (size_t i : pick) predicted_ms[i].push_back(plans[i].at("step_ms").get<double>());
      }
      for (size_t i : order) {
        const nlohmann::json& p = plans[i];
        const std::string label = p.at("plan").get<std::string>();
        const fs::path run_dir = dir / ("rank" + std::to_string(i + 1) + "-round" + std::to_string(round + 1));
        fs::create_directories(run_dir);
        const int64_t batch = p.at("micro_batch").get<int64_t>() * p.at("dp").get<int64_t>();
        const int warmup = std::clamp(static_cast<int>(std::ceil(o.warmup_s * 1e3 / std::max(1e-3, p.at("step_ms").get<double>()))),
                                      std::min(3, o.warmup), o.warmup);
        std::vector<std::string> args = {launch, "--servers", "0", "--trainers", std::to_string(c.trainers), "--timeout",
                                         std::to_string(o.timeout_s), job.string()};
        for (const std::string& s :
             {"parallel.dp=" + std::to_string(p.at("dp").get<int>()), "parallel.tp=" + std::to_string(p.at("tp").get<int>()),
              "parallel.pp=" + std::to_string(p.at("pp").get<int>()), "parallel.vpp=" + std::to_string(p.at("vpp").get<int>()),
              "parallel.schedule=" + p.at("schedule").get<std::string>(),
              "parallel.zero=" + std::to_string(p.at("zero").get<int>()),
              "parallel.recompute=" + p.at("recompute").get<std::string>(),
              "parallel.partition=\"" + p.at("partition").get<std::string>() + "\"",
              "train.micro_batches=" + std::to_string(p.at("micro_batches").get<int>()),
              "train.batch_size=" + std::to_string(batch), "train.steps=" + std::to_string(warmup + o.steps),
              "train.metrics_path=" + (run_dir / "m-{rank}.jsonl").string()}) {
          args.push_back("--set");
          args.push_back(s);
        }
        std::cerr << "plan: " << c.name << " round " << round + 1 << " #" << i + 1 << " " << label << " ... " << std::flush;
        Stopwatch took;
        STRATA_RETURN_IF_ERROR(LaunchJob(args, run_dir / "launch.log").WithContext(c.name + " " + label));
        std::cerr << took.Seconds() << " s\n";
        // The progress line's samples a step: train.batch_size x train.micro_batches.
        STRATA_ASSIGN_OR_RETURN(Measured m, ReadMeasured(run_dir, c.trainers, batch * p.at("micro_batches").get<int64_t>(),
                                                         warmup));
        runs[i].push_back(m);
      }
    }
    std::vector<double> predicted, measured, mem_err;
    std::vector<std::vector<double>> by_round(static_cast<size_t>(o.rounds));  // measured, per round
    double chosen_ms = 0, best_ms = 1e300;
    std::string best_plan;
    for (size_t i : pick) {
      const nlohmann::json& p = plans[i];
      const std::string label = p.at("plan").get<std::string>();
      std::vector<double> ms, early;
      Measured m;
      for (size_t r = 0; r < runs[i].size(); ++r) {
        ms.push_back(runs[i][r].step_ms);
        early.push_back(runs[i][r].early_ms);
        by_round[r].push_back(runs[i][r].step_ms);
        m.peak_bytes = std::max(m.peak_bytes, runs[i][r].peak_bytes);
      }
      m.step_ms = Median(ms);
      const double spread = (*std::max_element(ms.begin(), ms.end()) / *std::min_element(ms.begin(), ms.end()) - 1) * 100;
      const double ranked_pred = p.at("step_ms").get<double>();
      const double pred = Median(predicted_ms[i]);
      const double pred_mib = p.at("memory_bytes").get<double>() / (1 << 20);
      const double meas_mib = static_cast<double>(m.peak_bytes) / (1 << 20);
      predicted.push_back(pred);
      measured.push_back(m.step_ms);
      mem_err.push_back(meas_mib > 0 ? std::abs(pred_mib / meas_mib - 1) * 100 : 0);
      if (i == 0) chosen_ms = m.step_ms;
      if (m.step_ms < best_ms) {
        best_ms = m.step_ms;
        best_plan = label;
      }
      table.AddRow({c.name, static_cast<int64_t>(i + 1), label, ranked_pred, pred, m.step_ms, Median(early), spread,
                    (pred / m.step_ms - 1) * 100,
                    pred_mib, meas_mib, meas_mib > 0 ? (pred_mib / meas_mib - 1) * 100 : 0.0});
    }
    // How well the host can rank the plans at all: the rank correlation of one round's
    // measurements with another's (the predictions cannot be ranked better than this).
    std::vector<double> retest;
    for (size_t a = 0; a < by_round.size(); ++a) {
      for (size_t b = a + 1; b < by_round.size(); ++b) retest.push_back(Spearman(by_round[a], by_round[b]));
    }
    std::vector<double> abs_err;
    for (size_t k = 0; k < predicted.size(); ++k) abs_err.push_back(std::abs(predicted[k] / measured[k] - 1) * 100);
    summary.AddRow({c.name, static_cast<int64_t>(c.trainers), static_cast<int64_t>(predicted.size()),
                    Spearman(predicted, measured), retest.empty() ? std::nan("") : Median(retest), Median(abs_err), chosen_ms, best_ms, chosen_ms / best_ms, best_plan,
                    Median(mem_err)});
    if (static_cast<unsigned>(c.trainers) > cpus) {
      report.notes.push_back(c.name + ": " + std::to_string(c.trainers) + " trainer processes on " + std::to_string(cpus) +
                             " cores: oversubscribed (the planner scales compute by trainers / cores)");
    }
    report.details[c.name] = {{"ranking_head", nlohmann::json(plans.size() > 20 ? nlohmann::json(std::vector<nlohmann::json>(plans.begin(), plans.begin() + 20)) : plans)},
                              {"plans_ranked", plans.size()}, {"enumerated", ranked.value("enumerated", 0)}};
  }
  report.tables.push_back(std::move(table));
  report.tables.push_back(std::move(summary));
  report.notes.push_back("measured step: the slowest rank's, median over the " + std::to_string(o.steps) +
                         " steps after a warm-up (steps for " + fmt::format("{:g}", o.warmup_s) + " s by the prediction, 3 to " +
                         std::to_string(o.warmup) + "), then over --rounds runs (spread: slowest round over fastest); steps 3-20: the same over steps "
                         "3..20, as a 20-step run measures; memory: the largest rank's allocator high-water mark during a step");
  report.notes.push_back(o.recalibrate
                             ? "ranked ms: the prediction that ranked the plan; pred ms: the median of each round's "
                               "prediction, made just before the round's runs with a calibration of its own "
                               "(strata-plan --only), which the errors and Spearman use; chosen: the ranking's top plan"
                             : "pred ms: the ranking's prediction (--no-recalibrate)");
  report.notes.push_back("retest Spearman: the median over pairs of rounds of the rank correlation of one round's measured "
                         "step times with another's, the ceiling of what a prediction can reach on this host (needs --rounds >= 2)");
  report.notes.push_back(HostLoadNote(cpus, total.Seconds()));
  FinishWorkDir(work, o.keep, &report.notes);
  return report;
}

}  // namespace

BenchFn SetupPlanBench(CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--steps", o->steps, "measured steps per plan")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o->warmup, "most steps per plan before the measured ones")->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-s", o->warmup_s, "seconds of steps (by the predicted step) before the measured ones")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--others", o->others, "plans run besides the planner's top 3")->check(CLI::NonNegativeNumber);
  app.add_option("--rounds", o->rounds, "runs of every plan, interleaved; a plan's figure is their median")
      ->check(CLI::PositiveNumber);
  app.add_flag("!--no-recalibrate", o->recalibrate,
               "predict from the first ranking alone (default: each round re-predicts its plans with a fresh "
               "calibration, so that drift of the host's speed falls on both sides)");
  app.add_option("--cases", o->cases, "gpt (4 trainers), mlp (2 trainers)");
  app.add_option("--data", o->data, "text file for gpt (generated when absent)");
  app.add_option("--timeout", o->timeout_s, "seconds per job");
  app.add_flag("--keep", o->keep, "keep the jobs' work directory");
  return [o] { return RunPlanBench(*o); };
}

}  // namespace strata::bench
