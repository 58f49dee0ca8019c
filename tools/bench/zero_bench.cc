// zero_bench.cc: strata-bench zero: runs a small gpt job through strata-launch on real
// data-parallel trainer processes (sync.mode allreduce, Gloo) for every ZeRO stage 0, 1, 2 and
// every dp (and 3), and reads back from each trainer's metrics file: its step times, its traffic on the
// dp group (measured by the communicator, beside the trainer's own model of it and beside the
// textbook: an all-reduce of psi x 4 bytes for ZeRO-0, a reduce-scatter and an all-gather of
// psi x 4 each for ZeRO-1/2, and for ZeRO-3 the paper's 1.5x of that: two all-gathers (forward,
// backward) and a reduce-scatter, sizes counted "as all-reduce"), the part of the gradient sync
// that backward hid, ZeRO-3's part of its all-gathers the prefetch hid, and its memory lines (parameters, gradients, optimizer state, step peak).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
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
  std::string dp = "2,4";
  std::string stages = "0,1,2,3";
  int layers = 2;
  int width = 64;
  int heads = 4;
  int context = 32;
  int batch_size = 8;  // samples per replica per step
  int steps = 8;
  int warmup = 1;  // first steps left out of the step time (when steps remain)
  std::string data = "/usr/share/common-licenses/GPL-3";
  int timeout_s = 300;  // per job
  bool keep = false;
};

std::string JobYaml(const Options& o, const std::string& data_path) {
  std::ostringstream y;
  y << "model:\n  kind: gpt\n  layers: " << o.layers << "\n  heads: " << o.heads
    << "\n  width: " << o.width << "\n  context: " << o.context << "\n  vocab: 256\n"
    << "data:\n  kind: text\n  path: " << data_path << "\n  eval_samples: 64\n"
    << "optimizer:\n  kind: adamw\n  lr: 0.001\n"
    << "train:\n  steps: " << o.steps << "\n  batch_size: " << o.batch_size
    << "\n  log_every: 1\n  progress: false\n"
    << "sync:\n  mode: allreduce\n";
  return y.str();
}

// What one job's trainers wrote.
struct Run {
  int dp = 0, zero = 0;
  std::map<int64_t, double> step_ms;  // step -> slowest rank's step time
  int64_t comm_steps = 0;
  // The dp group, summed over the ranks' own view (every rank reports its part; rank 0's).
  int64_t sync_bytes = 0, sync_model_bytes = 0;  // gradient ops: all_reduce, reduce_scatter, all_gather
  int64_t dp_bytes = 0, dp_model_bytes = 0;      // every op on the dp group
  bool all_ranks_match = true;                   // measured == model on every rank and op
  nlohmann::json ops = nlohmann::json::object();
  double comm_seconds = 0, exposed_seconds = 0;  // summed over ranks
  double gather_seconds = 0, gather_exposed_seconds = 0;  // ZeRO-3's all-gathers, summed over ranks
  nlohmann::json memory;                         // rank 0's memory record
};

bool IsGradSyncOp(const std::string& op) {
  return op == "all_reduce" || op == "reduce_scatter" || op == "all_gather";
}

Result<Run> ReadRun(const fs::path& dir, int dp, int zero, int batch_size) {
  Run run;
  run.dp = dp;
  run.zero = zero;
  for (int r = 0; r < dp; ++r) {
    const fs::path path = dir / ("m-" + std::to_string(r) + ".jsonl");
    std::ifstream in(path);
    if (!in) return Status::NotFound("no metrics file " + path.string());
    bool saw_comm = false;
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object()) continue;
      if (j.contains("samples_per_s") && j.contains("loss")) {
        const double sps = j["samples_per_s"].get<double>();
        if (sps > 0) {
          double& slowest = run.step_ms[j.at("step").get<int64_t>()];
          slowest = std::max(slowest, 1e3 * batch_size / sps);
        }
      }
      if (j.contains("memory") && r == 0) run.memory = j["memory"];
      if (j.contains("grad_sync")) {
        run.comm_seconds += j["grad_sync"].value("comm_seconds", 0.0);
        run.exposed_seconds += j["grad_sync"].value("exposed_seconds", 0.0);
        run.gather_seconds += j["grad_sync"].value("gather_seconds", 0.0);
        run.gather_exposed_seconds += j["grad_sync"].value("gather_exposed_seconds", 0.0);
      }
      if (!j.contains("comm")) continue;
      saw_comm = true;
      const auto& comm = j["comm"];
      if (r == 0) run.comm_steps = comm.value("steps", int64_t{0});
      for (const auto& g : comm.at("groups")) {
        if (g.value("dim", "") != "dp") continue;
        for (const auto& [op, s] : g.at("ops").items()) {
          const int64_t bytes = s.value("bytes", int64_t{0});
          const int64_t model = s.value("model_bytes", int64_t{0});
          if (bytes != model) run.all_ranks_match = false;
          if (r != 0) continue;
          run.ops[op] = s;
          run.dp_bytes += bytes;
          run.dp_model_bytes += model;
          if (IsGradSyncOp(op)) {
            run.sync_bytes += bytes;
            run.sync_model_bytes += model;
          }
        }
      }
    }
    if (!saw_comm) return Status::NotFound(path.string() + ": no comm record");
  }
  if (run.step_ms.empty()) return Status::NotFound(dir.string() + ": no step records");
  if (!run.memory.is_object()) return Status::NotFound(dir.string() + ": no memory record");
  return run;
}

Result<Report> RunZeroBench(const Options& o) {
  std::vector<int> dps, stages;
  for (const std::string& s : SplitList(o.dp)) dps.push_back(std::atoi(s.c_str()));
  for (const std::string& s : SplitList(o.stages)) stages.push_back(std::atoi(s.c_str()));
  if (dps.empty() || stages.empty()) return Status::InvalidArgument("--dp and --stages must not be empty");
  if (std::ranges::any_of(dps, [](int v) { return v < 2; })) {
    return Status::InvalidArgument("--dp: every entry must be >= 2");
  }
  if (std::ranges::any_of(stages, [](int v) { return v < 0 || v > 3; })) {
    return Status::InvalidArgument("--stages: every entry must be 0, 1, 2 or 3");
  }
  if (o.steps < 1) return Status::InvalidArgument("--steps must be >= 1");

  STRATA_ASSIGN_OR_RETURN(JobWorkDir dir, MakeJobWorkDir("zero", o.data, [&](const std::string& data) {
                            return JobYaml(o, data);
                          }));
  const std::string& launch = dir.launch;
  const fs::path& work = dir.work;
  const std::string& data_path = dir.data_path;
  const fs::path& job_path = dir.job_path;

  const unsigned cpus = std::thread::hardware_concurrency();
  Table table("strata-bench zero: ZeRO stages on data-parallel gpt trainers (sync allreduce, Gloo)",
              {{"dp", "dp", Table::Format::kInteger},
               {"zero", "zero", Table::Format::kInteger},
               {"step ms", "step_ms", Table::Format::kFixed1},
               {"vs ZeRO-0", "step_ratio", Table::Format::kFixed2},
               {"sync B/step", "sync_bytes_per_step", Table::Format::kInteger},
               {"theory B/step", "theory_bytes_per_step", Table::Format::kInteger},
               {"meas/theory", "bytes_ratio", Table::Format::kFixed3},
               {"dp bytes", "measured_bytes", Table::Format::kInteger},
               {"model bytes", "model_bytes", Table::Format::kInteger},
               {"= model", "bytes_match", Table::Format::kText},
               {"hidden %", "hidden_pct", Table::Format::kFixed1},
               {"gathers hidden %", "gather_hidden_pct", Table::Format::kFixed1},
               {"params/psi", "param_bytes_per_param", Table::Format::kFixed2},
               {"grads/psi", "grad_bytes_per_param", Table::Format::kFixed2},
               {"between/psi", "grad_bytes_between_per_param", Table::Format::kFixed2},
               {"state/psi", "state_bytes_per_param", Table::Format::kFixed2},
               {"formula/psi", "formula_bytes_per_param", Table::Format::kFixed2},
               {"peak MiB", "peak_mib", Table::Format::kFixed2},
               {"note", "note", Table::Format::kText}});
  nlohmann::json details = nlohmann::json::array();
  Stopwatch total;
  bool oversubscribed_any = false;
  for (int dp : dps) {
    double zero0_ms = 0;
    for (int zero : stages) {
      const std::string where = "dp " + std::to_string(dp) + " zero " + std::to_string(zero);
      const fs::path dir = work / ("dp" + std::to_string(dp) + "-zero" + std::to_string(zero));
      fs::create_directories(dir);
      std::vector<std::string> args = {launch, "--servers", "0", "--trainers", std::to_string(dp),
                                       "--timeout", std::to_string(o.timeout_s), job_path.string()};
      for (const std::string& s :
           {"parallel.zero=" + std::to_string(zero), "train.metrics_path=" + (dir / "m-{rank}.jsonl").string()}) {
        args.push_back("--set");
        args.push_back(s);
      }
      std::cerr << "zero: " << where << " ... " << std::flush;
      Stopwatch took;
      STRATA_RETURN_IF_ERROR(LaunchJob(args, dir / "launch.log").WithContext(where));
      std::cerr << took.Seconds() << " s\n";
      STRATA_ASSIGN_OR_RETURN(Run run, ReadRun(dir, dp, zero, o.batch_size));

      std::vector<double> ms;
      for (const auto& [step, t] : run.step_ms) {
        if (step > o.warmup || o.steps <= o.warmup) ms.push_back(t);
      }
      const double step_ms = Median(ms);
      if (zero == 0) zero0_ms = step_ms;
      const nlohmann::json& mem = run.memory;
      const int64_t psi = mem.value("psi", int64_t{0});
      const double per = psi > 0 ? static_cast<double>(psi) : 1.0;
      const int64_t steps = std::max<int64_t>(run.comm_steps, 1);
      const double sync_per_step = static_cast<double>(run.sync_bytes) / steps;
      const double theory = (zero == 0 ? 1.0 : zero < 3 ? 2.0 : 3.0) * 4.0 * static_cast<double>(psi);
      const double hidden =
          run.comm_seconds > 0 ? std::max(0.0, 1.0 - run.exposed_seconds / run.comm_seconds) : 0.0;
      const double gather_hidden =
          run.gather_seconds > 0 ? std::max(0.0, 1.0 - run.gather_exposed_seconds / run.gather_seconds) : 0.0;
      const bool over = static_cast<unsigned>(dp) > cpus;
      oversubscribed_any |= over;
      table.AddRow({dp, zero, step_ms,
                    zero0_ms > 0 ? nlohmann::json(step_ms / zero0_ms) : nlohmann::json(),
                    static_cast<uint64_t>(sync_per_step), static_cast<uint64_t>(theory),
                    theory > 0 ? nlohmann::json(sync_per_step / theory) : nlohmann::json(),
                    run.dp_bytes, run.dp_model_bytes,
                    run.dp_bytes == run.dp_model_bytes && run.all_ranks_match ? "yes" : "NO",
                    run.comm_seconds > 0 ? nlohmann::json(100 * hidden) : nlohmann::json(),
                    run.gather_seconds > 0 ? nlohmann::json(100 * gather_hidden) : nlohmann::json(),
                    mem.value("param_bytes", int64_t{0}) / per,
                    mem.value("grad_bytes_step", int64_t{0}) / per,
                    mem.value("grad_bytes_between", int64_t{0}) / per,
                    mem.value("state_bytes", int64_t{0}) / per,
                    mem.value("formula_bytes_per_param", 0.0),
                    static_cast<double>(mem.value("step_peak_bytes", int64_t{0})) / (1 << 20),
                    over ? "oversubscribed: " + std::to_string(dp) + " ranks on " +
                               std::to_string(cpus) + " cores"
                         : std::string()});
      details.push_back({{"dp", dp},
                         {"zero", zero},
                         {"psi", psi},
                         {"comm_steps", run.comm_steps},
                         {"step_ms", run.step_ms.size() ? nlohmann::json(ms) : nlohmann::json::array()},
                         {"dp_ops_rank0", run.ops},
                         {"grad_sync_comm_seconds", run.comm_seconds},
                         {"grad_sync_exposed_seconds", run.exposed_seconds},
                         {"gather_seconds", run.gather_seconds},
                         {"gather_exposed_seconds", run.gather_exposed_seconds},
                         {"memory_rank0", mem}});
    }
  }

  Report report;
  report.tables.push_back(std::move(table));
  report.details = {{"configurations", std::move(details)}};
  report.config = {{"dp", dps},
                   {"stages", stages},
                   {"model",
                    {{"kind", "gpt"},
                     {"layers", o.layers},
                     {"width", o.width},
                     {"heads", o.heads},
                     {"context", o.context},
                     {"vocab", 256}}},
                   {"optimizer", "adamw"},
                   {"batch_size", o.batch_size},
                   {"steps", o.steps},
                   {"warmup", o.warmup},
                   {"data", data_path},
                   {"cpus", cpus}};
  const std::string text = HostLoadNote(cpus, total.Seconds());
  report.notes = {
      "each configuration: strata-launch --servers 0 --trainers dp of a byte-level gpt, sync.mode "
      "allreduce, parallel.zero = the stage, OPENBLAS_NUM_THREADS=1, Gloo on the dp group; every "
      "trainer writes its step records, memory record and end-of-run comm record to its metrics "
      "file.",
      "step ms: per step the slowest rank's (batch / its samples per second), median over the "
      "steps after the first --warmup; vs ZeRO-0: over ZeRO-0's at the same dp.",
      "sync B/step: rank 0's bytes of the gradient collectives on the dp group (all_reduce, or "
      "reduce_scatter + all_gather; sizes counted as all-reduce: the whole buffer) measured by "
      "the communicator, over the steps (the first step's extra reduce-scatter under overlap "
      "included); theory: psi x 4 (ZeRO-0: one all-reduce), 2 x psi x 4 (ZeRO-1/2: "
      "reduce-scatter + all-gather) or 3 x psi x 4 (ZeRO-3: all-gathers in forward and in "
      "backward, one reduce-scatter: 1.5x ZeRO-1/2), psi the model's parameters; ZeRO-3 falls "
      "below by the last unit, kept gathered from its forward to its backward; above 1 by the buckets' padding "
      "to a multiple of dp and the first-step term. dp bytes / model bytes: every op on the dp "
      "group (scalar host all-reduces and the first step's broadcast too), totals over the run, "
      "measured beside the trainer's own traffic model; = model: equal on every rank.",
      "hidden %: 1 - exposed / total seconds of the gradient sync's bucket collectives "
      "(all-reduce, or reduce-scatter under ZeRO), summed over ranks. gathers hidden %: the "
      "parameter all-gathers, 1 - the seconds the training thread waited for them / the "
      "seconds the communication thread spent in them, summed over ranks: ZeRO-1/2's after the "
      "optimizer step, queued and waited for unit by unit by the next forward; ZeRO-3's per "
      "unit in forward and backward, the next unit's prefetched behind the current one's "
      "compute.",
      "memory (rank 0, after the second step): bytes per parameter of parameters, gradients "
      "during a step and between steps, optimizer state; formula: ZeRO's paper for fp32 AdamW; "
      "peak: the allocator's high-water mark during a step (activations included).",
      text};
  if (oversubscribed_any) {
    report.notes.push_back(
        "figures taken oversubscribed: some configurations ran more ranks than the host has "
        "cores, so step times and the hidden fraction include time preempted by the other ranks.");
  }
  FinishWorkDir(work, o.keep, &report.notes);
  return report;
}

}  // namespace

BenchFn SetupZeroBench(CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--dp", o->dp, "data-parallel replicas, comma-separated")->capture_default_str();
  app.add_option("--stages", o->stages, "ZeRO stages, comma-separated")->capture_default_str();
  app.add_option("--layers", o->layers, "gpt blocks")->capture_default_str();
  app.add_option("--width", o->width, "gpt width")->capture_default_str();
  app.add_option("--heads", o->heads, "gpt attention heads")->capture_default_str();
  app.add_option("--context", o->context, "gpt sequence length")->capture_default_str();
  app.add_option("--batch-size", o->batch_size, "samples per replica per step")->capture_default_str();
  app.add_option("--steps", o->steps, "training steps per configuration")->capture_default_str();
  app.add_option("--warmup", o->warmup, "first steps left out of the step time")->capture_default_str();
  app.add_option("--data", o->data, "text file to train on (a generated one when missing)")
      ->capture_default_str();
  app.add_option("--timeout", o->timeout_s, "limit on each job, seconds")->capture_default_str();
  app.add_flag("--keep", o->keep, "keep the work directory (job, metrics, launch logs)");
  return [o] { return RunZeroBench(*o); };
}

}  // namespace strata::bench
