// offload_bench.cc: strata-bench offload: one gpt (examples/gpt_offload.yaml's by default) on
// the same trainer processes under sync.mode allreduce (the optimizer on the trainers, the
// peer), offload without the unit pipeline (every pull before the step and every push after
// it), offload, and offload with the delayed update, in one run. From each trainer's metrics
// file: the step time, the part of the pushes and pulls that ran behind compute, the
// trainer's bytes per parameter (parameters, gradients, optimizer state), and the loss of the
// last steps (the delayed update beside the undelayed run).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
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
  int trainers = 2;
  int servers = 2;
  GptShape gpt{4, 128, 4, 64};
  int batch_size = 16;  // global
  int steps = 40;
  int warmup = 2;        // first steps left out of the step time
  int tail = 10;         // last steps whose mean loss is reported
  int delayed_warmup = 10;
  double lr = 0.001;
  std::string data = "/usr/share/common-licenses/GPL-3";
  int timeout_s = 600;
  bool keep = false;
};

std::string JobYaml(const Options& o, const std::string& data_path) {
  std::ostringstream y;
  y << "model: " << o.gpt.ModelYaml() << "\n"
    << "data: {kind: text, path: " << data_path << ", eval_samples: 4096}\n"
    << "optimizer: {kind: adamw, lr: " << o.lr << ", beta2: 0.95, weight_decay: 0.01}\n"
    << "train: {steps: " << o.steps << ", batch_size: " << o.batch_size << ", log_every: 1, progress: false}\n"
    << "sync: {consistency: bsp, delayed_warmup: " << o.delayed_warmup << "}\n";
  return y.str();
}

struct Config {
  std::string name;
  int servers;
  std::vector<std::string> sets;
};

struct Run {
  std::map<int64_t, double> step_ms;  // slowest rank's
  std::vector<double> losses;         // rank 0's
  double push = 0, push_exposed = 0, pull = 0, pull_exposed = 0;  // summed over ranks
  nlohmann::json memory;              // rank 0's
};

Result<Run> ReadRun(const fs::path& dir, int trainers, int batch_size) {
  Run run;
  for (int r = 0; r < trainers; ++r) {
    const fs::path path = dir / ("m-" + std::to_string(r) + ".jsonl");
    std::ifstream in(path);
    if (!in) return Status::NotFound("no metrics file " + path.string());
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object()) continue;
      if (j.contains("samples_per_s") && j.contains("loss")) {
        const double sps = j["samples_per_s"].get<double>();
        if (sps > 0) {
          double& slowest = run.step_ms[j.at("step").get<int64_t>()];
          slowest = std::max(slowest, 1e3 * batch_size / sps);
        }
        if (r == 0) run.losses.push_back(j["loss"].get<double>());
      }
      if (j.contains("memory") && r == 0) run.memory = j["memory"];
      if (j.contains("offload")) {
        const auto& o = j["offload"];
        run.push += o.value("push_seconds", 0.0);
        run.push_exposed += o.value("push_exposed_seconds", 0.0);
        run.pull += o.value("pull_seconds", 0.0);
        run.pull_exposed += o.value("pull_exposed_seconds", 0.0);
      }
    }
  }
  if (run.step_ms.empty()) return Status::NotFound(dir.string() + ": no step records");
  return run;
}

nlohmann::json HiddenPct(double total, double exposed) {
  return total > 0 ? nlohmann::json(100 * std::max(0.0, 1.0 - exposed / total)) : nlohmann::json();
}

Result<Report> RunOffloadBench(const Options& o) {
  if (o.trainers < 1 || o.servers < 1) return Status::InvalidArgument("--trainers and --servers must be >= 1");
  if (o.steps <= o.warmup) return Status::InvalidArgument("--steps must exceed --warmup");
  if (o.tail < 1 || o.tail > o.steps) return Status::InvalidArgument("--tail must be in [1, --steps]");
  if (o.batch_size % o.trainers != 0) return Status::InvalidArgument("--batch-size must divide over --trainers");
  STRATA_ASSIGN_OR_RETURN(JobWorkDir dir, MakeJobWorkDir("offload", o.data, [&](const std::string& data) {
                            return JobYaml(o, data);
                          }));
  const std::string& launch = dir.launch;
  const fs::path& work = dir.work;
  const std::string& data_path = dir.data_path;
  const fs::path& job_path = dir.job_path;
  const std::vector<Config> configs = {
      {"allreduce", 0, {"sync.mode=allreduce"}},
      {"offload, serial", o.servers, {"sync.mode=offload", "sync.overlap=false"}},
      {"offload", o.servers, {"sync.mode=offload"}},
      {"offload, pulls after clock", o.servers, {"sync.mode=offload", "sync.pull_early=false"}},
      {"offload, delayed", o.servers, {"sync.mode=offload", "sync.delayed_update=true", "sync.delayed_predict=false"}},
      {"offload, predicted", o.servers, {"sync.mode=offload", "sync.delayed_update=true"}},
      {"offload, bf16", o.servers, {"sync.mode=offload", "sync.wire=bf16", "train.precision=bf16"}},
  };
  const unsigned cpus = std::thread::hardware_concurrency();
  Table table("strata-bench offload: gpt under allreduce and offload (servers hold the masters and AdamW state)",
              {{"mode", "mode", Table::Format::kText},
               {"servers", "servers", Table::Format::kInteger},
               {"step ms", "step_ms", Table::Format::kFixed1},
               {"vs allreduce", "step_ratio", Table::Format::kFixed2},
               {"push s", "push_seconds", Table::Format::kFixed2},
               {"push hidden %", "push_hidden_pct", Table::Format::kFixed1},
               {"pull s", "pull_seconds", Table::Format::kFixed2},
               {"pull hidden %", "pull_hidden_pct", Table::Format::kFixed1},
               {"waited ms", "waited_ms_per_step", Table::Format::kFixed2},
               {"params/psi", "param_bytes_per_param", Table::Format::kFixed2},
               {"grads/psi", "grad_bytes_per_param", Table::Format::kFixed2},
               {"state/psi", "state_bytes_per_param", Table::Format::kFixed2},
               {"tail loss", "tail_loss", Table::Format::kFixed3},
               {"vs undelayed", "loss_vs_undelayed", Table::Format::kFixed3}});
  nlohmann::json details = nlohmann::json::array();
  Stopwatch total;
  double allreduce_ms = 0, undelayed_loss = 0;
  for (size_t c = 0; c < configs.size(); ++c) {
    const Config& cfg = configs[c];
    const fs::path dir = work / ("c" + std::to_string(c));
    fs::create_directories(dir);
    std::vector<std::string> args = {launch, "--servers", std::to_string(cfg.servers), "--trainers",
                                     std::to_string(o.trainers), "--timeout", std::to_string(o.timeout_s),
                                     job_path.string()};
    std::vector<std::string> sets = cfg.sets;
    sets.push_back("train.metrics_path=" + (dir / "m-{rank}.jsonl").string());
    for (const std::string& s : sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    std::cerr << "offload: " << cfg.name << " ... " << std::flush;
    Stopwatch took;
    STRATA_RETURN_IF_ERROR(LaunchJob(args, dir / "launch.log").WithContext(cfg.name));
    std::cerr << took.Seconds() << " s\n";
    STRATA_ASSIGN_OR_RETURN(Run run, ReadRun(dir, o.trainers, o.batch_size));
    std::vector<double> ms;
    for (const auto& [step, t] : run.step_ms) {
      if (step > o.warmup) ms.push_back(t);
    }
    const double step_ms = Median(ms);
    if (c == 0) allreduce_ms = step_ms;
    double tail = 0;
    const size_t n = run.losses.size(), k = std::min<size_t>(n, static_cast<size_t>(o.tail));
    for (size_t i = n - k; i < n; ++i) tail += run.losses[i] / static_cast<double>(k);
    if (cfg.name == "offload") undelayed_loss = tail;
    const nlohmann::json& mem = run.memory;
    const double per = std::max<double>(1.0, static_cast<double>(mem.value("psi", int64_t{0})));
    const bool delayed = cfg.name == "offload, delayed" || cfg.name == "offload, predicted";
    table.AddRow({cfg.name, cfg.servers, step_ms, allreduce_ms > 0 ? nlohmann::json(step_ms / allreduce_ms) : nlohmann::json(),
                  c > 0 ? nlohmann::json(run.push) : nlohmann::json(), HiddenPct(run.push, run.push_exposed),
                  c > 0 ? nlohmann::json(run.pull) : nlohmann::json(), HiddenPct(run.pull, run.pull_exposed),
                  c > 0 ? nlohmann::json((run.push_exposed + run.pull_exposed) * 1e3 / (o.steps * o.trainers))
                        : nlohmann::json(),
                  mem.value("param_bytes", int64_t{0}) / per, mem.value("grad_bytes_step", int64_t{0}) / per,
                  mem.value("state_bytes", int64_t{0}) / per, tail,
                  delayed && undelayed_loss > 0 ? nlohmann::json(tail / undelayed_loss) : nlohmann::json()});
    details.push_back({{"mode", cfg.name},
                       {"sets", cfg.sets},
                       {"step_ms", ms},
                       {"losses_rank0", run.losses},
                       {"push_seconds", run.push},
                       {"push_exposed_seconds", run.push_exposed},
                       {"pull_seconds", run.pull},
                       {"pull_exposed_seconds", run.pull_exposed},
                       {"memory_rank0", mem}});
  }
  Report report;
  report.tables.push_back(std::move(table));
  report.details = {{"configurations", std::move(details)}};
  report.config = {{"trainers", o.trainers},
                   {"servers", o.servers},
                   {"model", o.gpt.ToJson()},
                   {"optimizer", {{"kind", "adamw"}, {"lr", o.lr}}},
                   {"batch_size", o.batch_size},
                   {"steps", o.steps},
                   {"warmup", o.warmup},
                   {"delayed_warmup", o.delayed_warmup},
                   {"data", data_path},
                   {"cpus", cpus}};
  report.notes = {
      "each mode: strata-launch of the same gpt job on --trainers processes (OPENBLAS_NUM_THREADS=1), "
      "allreduce with no servers (AdamW on the trainers, gradients all-reduced in buckets during "
      "backward over Gloo), the offload modes with --servers servers holding the fp32 masters and "
      "AdamW's state (BSP: the replicas' gradients averaged, one update per step).",
      "offload, serial: sync.overlap false, every parameter pulled before the step and every "
      "gradient pushed after it (what sync.mode ps does); offload: each gradient pushed as backward "
      "finishes it, each unit's next parameters pulled as soon as its gradients went (the servers "
      "answer once they applied them) and waited for just ahead of its forward; pulls after clock: "
      "the same with every pull issued after the step's clock (sync.pull_early false); delayed: each step on "
      "the weights one update behind from step delayed_warmup + 1 (DeepSpeed's DPU); predicted: "
      "the same, computing on the pulled weights moved on by the last update (sync.delayed_predict); "
      "bf16: sync.wire bf16 (gradients and weights in bf16 on the wire, the weights held in bf16 between "
      "uses on the trainer) and train.precision bf16 (bf16 matmuls, activations saved in bf16).",
      "step ms: per step the slowest rank's (global batch / its samples per second), median over the "
      "steps after --warmup. push/pull s: the union of the requests' intervals from issue to reply, "
      "summed over ranks; hidden %: 1 - the seconds the training thread waited for them / that; "
      "waited ms: those seconds, pushes' and pulls', per step and rank (a pull issued earlier is in "
      "flight longer, so compare the waits as well as the fractions).",
      "memory (rank 0, after the second step): bytes per parameter the trainer holds; the delayed "
      "update adds the buffers its pulls land in. grads/psi: the most gradient bytes alive at once "
      "during a step (offload: a unit's exist from its backward until their push is acknowledged, "
      "the pushes' bf16 copies included; none between steps). tail loss: rank 0's mean training "
      "loss over the last --tail steps; vs undelayed: the delayed runs' over offload's.",
      HostLoadNote(cpus, total.Seconds())};
  if (static_cast<unsigned>(o.trainers + o.servers + 1) > cpus) {
    report.notes.push_back("figures taken oversubscribed: " + std::to_string(o.trainers) + " trainers, " +
                           std::to_string(o.servers) + " servers and a scheduler on " + std::to_string(cpus) +
                           " cores (the servers mostly wait).");
  }
  FinishWorkDir(work, o.keep, &report.notes);
  return report;
}

}  // namespace

BenchFn SetupOffloadBench(CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--trainers", o->trainers, "trainer processes")->capture_default_str();
  app.add_option("--servers", o->servers, "server processes (offload modes)")->capture_default_str();
  AddGptShapeOptions(app, o->gpt);
  app.add_option("--batch-size", o->batch_size, "global batch")->capture_default_str();
  app.add_option("--steps", o->steps, "training steps per mode")->capture_default_str();
  app.add_option("--warmup", o->warmup, "first steps left out of the step time")->capture_default_str();
  app.add_option("--tail", o->tail, "last steps whose mean loss is reported")->capture_default_str();
  app.add_option("--delayed-warmup", o->delayed_warmup, "undelayed steps before the delayed update")
      ->capture_default_str();
  app.add_option("--lr", o->lr, "AdamW learning rate (constant)")->capture_default_str();
  app.add_option("--data", o->data, "text file to train on (a generated one when missing)")->capture_default_str();
  app.add_option("--timeout", o->timeout_s, "limit on each job, seconds")->capture_default_str();
  app.add_flag("--keep", o->keep, "keep the work directory (job, metrics, launch logs)");
  return [o] { return RunOffloadBench(*o); };
}

}  // namespace strata::bench
