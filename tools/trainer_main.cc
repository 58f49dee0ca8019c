// trainer_main.cc: strata-trainer, trains a model from a job file, alone or as one trainer of
// a cluster (sync.mode allreduce, ps or hybrid):
//   strata-trainer --config examples/mlp.yaml [--set train.steps=100] [--print-config]
//   strata-launch --servers 2 --trainers 2 examples/ctr.yaml   (starts strata-trainer --rank r)
#include <CLI/CLI.hpp>

#include <algorithm>

#include <iostream>
#include <thread>

#include <unistd.h>  // environ

#include "cluster/node.h"
#include "common/allocator.h"
#include "common/logging.h"
#include "tools/job_config.h"
#include "tools/launch_report.h"
#include "tools/metrics_endpoint.h"
#include "tools/placement_env.h"
#include "tools/signals.h"
#include "trainer/auto/auto_plan.h"
#include "trainer/auto/auto_select.h"
#include "trainer/plot.h"
#include "trainer/progress.h"
#include "trainer/trainer.h"

namespace strata {
namespace {

// train.plot_path: the loss (and AUC) curve as a PNG. Returns the path written, or empty (a
// missing gnuplot is a one-line note, not a failure of the run).
std::string Plot(const TrainJob& job, const Trainer& trainer, const TrainSummary& s) {
  if (job.train.plot_path.empty() || s.losses.empty()) return "";
  TrainingCurves curves;
  static constexpr const char* kModels[] = {"mlp", "gpt", "ctr"};
  static constexpr const char* kModes[] = {"local", "allreduce", "ps", "hybrid"};
  curves.title = fmt::format("{}, {}, {} trainer(s)", kModels[static_cast<int>(job.model.kind)],
                             kModes[static_cast<int>(job.sync.mode)], trainer.world());
  curves.first_step = s.first_step;
  curves.losses = s.losses;
  curves.evals = trainer.progress().evals();
  curves.oracle_auc = s.eval.oracle_auc;
  if (Status st = WritePlot(curves, job.train.plot_path); !st.ok()) {
    spdlog::warn("no plot: {}", st.ToString());
    return "";
  }
  spdlog::info("plot: wrote {}", job.train.plot_path);
  return job.train.plot_path;
}

void PrintSummary(const TrainJob& job, const Trainer& trainer, const TrainSummary& s, bool launched) {
  const EvalMetrics& e = s.eval;
  if (job.infer.enabled()) {
    // Inference: what was computed, not training figures.
    std::string line = fmt::format("inference done ({}, checkpoint step {}, {})",
                                   job.infer.mode == InferOptions::Mode::kEval ? "eval" : "generate", s.first_step,
                                   trainer.plan().ToString());
    if (job.infer.mode == InferOptions::Mode::kEval) line += fmt::format(": eval loss {:.5f}", e.loss);
    if (e.auc >= 0) line += fmt::format(", auc {:.4f}", e.auc);
    if (!job.infer.output_path.empty()) line += ", results in " + job.infer.output_path;
    spdlog::info("{}", line);
    return;
  }
  std::string line = fmt::format("done: {} steps in {:.1f}s, {:.0f} samples/s", s.losses.size(),
                                 s.seconds, s.samples_per_second);
  if (job.model.kind == ModelOptions::Kind::kGpt) {
    line += fmt::format(" ({:.0f} tokens/s)", s.samples_per_second * job.model.context);
  }
  if (!s.losses.empty()) line += fmt::format(", final loss {:.5f}", s.losses.back());
  line += fmt::format(", eval loss {:.5f}", e.loss);
  if (e.auc >= 0) line += fmt::format(", auc {:.4f} (oracle {:.4f})", e.auc, e.oracle_auc);
  auto hidden = [](double total, double exposed) { return 100.0 * std::max(0.0, 1.0 - exposed / total); };
  if (s.gather_seconds > 0) {
    line += fmt::format(", parameter all-gathers {:.2f}s of which {:.0f}% hidden behind compute", s.gather_seconds,
                        hidden(s.gather_seconds, s.exposed_gather_seconds));
  }
  if (s.comm_seconds > 0) {
    line += fmt::format(", {} {:.2f}s of which {:.0f}% hidden behind backward",
                        job.parallel.zero > 0 ? "reduce-scatter" : "all-reduce", s.comm_seconds,
                        hidden(s.comm_seconds, s.exposed_comm_seconds));
  }
  if (s.push_seconds > 0) {
    line += fmt::format(", pushes {:.2f}s and pulls {:.2f}s in flight, {:.0f}% and {:.0f}% hidden behind compute",
                        s.push_seconds, s.pull_seconds, hidden(s.push_seconds, s.exposed_push_seconds),
                        hidden(s.pull_seconds, s.exposed_pull_seconds));
  }
  if (trainer.plan().pp > 1) {
    line += fmt::format(", pipeline bubble {:.1f}% (measured), peak activations {:.1f} MiB",
                        100.0 * s.pipeline.bubble(), s.pipeline.peak_saved_bytes / 1048576.0);
  }
  if (trainer.plan().pp > 1) {
    line += fmt::format(" [{} trainers: {}]", trainer.world(), trainer.plan().ToString());
  } else if (trainer.world() > 1) {
    line += fmt::format(" [{} trainers]", trainer.world());
  }
  spdlog::info("{}", line);
  for (const std::string& row : FormatCommReport(s.comm)) spdlog::info("{}", row);
  const std::string plot = Plot(job, trainer, s);
  if (launched) {
    // strata-launch's summary table takes these figures.
    JobReport r;
    r.steps = static_cast<long>(s.losses.size());
    r.seconds = s.seconds;
    r.samples_per_second = s.samples_per_second;
    r.loss = s.losses.empty() ? 0 : s.losses.back();
    r.eval_loss = e.loss;
    r.auc = e.auc;
    r.oracle_auc = e.auc >= 0 ? e.oracle_auc : -1;
    if (s.comm_seconds > 0) {
      r.comm_name = job.parallel.zero > 0 ? "reduce-scatter" : "all-reduce";
      r.comm_seconds = s.comm_seconds;
      r.comm_hidden_percent = hidden(s.comm_seconds, s.exposed_comm_seconds);
    }
    if (s.push_seconds > 0) {
      r.comm_name = "push + pull";
      r.comm_seconds = s.push_seconds + s.pull_seconds;
      r.comm_hidden_percent = hidden(r.comm_seconds, s.exposed_push_seconds + s.exposed_pull_seconds);
    }
    r.plot_path = plot;
    std::printf("@summary %s\n", JobReportJson(r).c_str());
    std::fflush(stdout);
  }
}

// A trainer the scheduler declared dead while it ran may register again and go on where nothing
// was built around its absence: one data-parallel replica of a sync.mode ps job under ASP or SSP
// with a fixed membership (the servers count its clocks again, ps/server_clocks.cc). Not under
// BSP (its death failed the clock), elastic (it left the split), all-reduce or model parallelism
// (fixed collective groups, whose barriers failed on its death).
bool ComesBackWhenDeclaredDead(const JobConfig& config) {
  const TrainJob& t = config.trainer;
  return t.sync.mode == SyncOptions::Mode::kPs && t.sync.consistency != Consistency::kBsp && !config.cluster.elastic &&
         t.parallel.tp == 1 && t.parallel.pp == 1 && t.parallel.cp == 1 && !t.parallel.auto_plan;
}

int Train(const JobConfig& config, Node* node, bool launched, const AutoSelectOptions& planner, int metrics_port) {
  TrainJob job = config.trainer;
  job.server_replication = config.server.replication;
  if (job.parallel.auto_plan) {
    // The planner picks the plan (trainer 0 measures and publishes; the others read it).
    AutoSelectOptions o = planner;
    o.world = node ? node->view().Count(Role::kTrainer) : 1;
    o.timeout = std::max(o.timeout, Millis(job.sync.timeout_ms));  // planning takes minutes on a small CPU host
    std::vector<std::string> why;
    Result<TrainJob> chosen = SelectAutoPlan(job, node, o, &why);
    for (const std::string& line : why) spdlog::info("{}", line);
    if (!chosen.ok()) {
      spdlog::error("{}", chosen.status().ToString());
      return chosen.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
    job = std::move(chosen).value();
  }
  if (job.auto_parallel.enabled()) {
    const int trainers = job.sync.mode == SyncOptions::Mode::kLocal ? 1 : config.cluster.trainers;
    if (Status s = CheckAutoWorld(job, trainers); !s.ok()) {
      spdlog::error("{}", s.ToString());
      return 2;
    }
  }
  auto trainer = Trainer::Create(job, node, launched);
  if (!trainer.ok()) {
    spdlog::error("{}", trainer.status().ToString());
    return 1;
  }
  // cluster.metrics_port: this trainer's /metrics, fed by its progress reports.
  MetricsRegistry metrics;
  MetricsEndpoint metrics_endpoint("trainer", (*trainer)->rank(), &metrics);
  if (!StartMetricsIfAsked(metrics_endpoint, metrics_port, config.cluster.metrics_port, Role::kTrainer, (*trainer)->rank(),
                           config.cluster.servers)) {
    return 1;
  }
  (*trainer)->SetMetrics(&metrics);
  if ((*trainer)->rank() == 0) {
    spdlog::info("model has {} parameters", (*trainer)->model().params().NumElements());
    if (job.auto_parallel.enabled()) {
      // The job loaded, so the plan derives; print what it derived.
      if (Result<AutoPlan> plan = DeriveAutoPlan(job); plan.ok()) {
        for (const std::string& line : plan->Explain()) spdlog::info("{}", line);
      }
    }
  }
  // Between steps: SIGINT/SIGTERM, or a scheduler silent past cluster.scheduler_timeout_ms.
  (*trainer)->set_stop_check([node]() -> Status {
    if (StopRequested()) return Status::Cancelled("stopped by a signal");
    return node ? node->SchedulerStatus() : Status::OK();
  });
  auto summary = (*trainer)->Run();
  if (!summary.ok()) {
    spdlog::error("{}", summary.status().ToString());
    return 1;
  }
  if ((*trainer)->rank() == 0) PrintSummary(job, **trainer, *summary, launched);
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  using namespace strata;
  TuneHostMallocForLargeBuffers();  // before any thread starts
  CLI::App app{"strata-trainer: trains a model (mlp, gpt, ctr) alone or as one trainer of a cluster, or serves a checkpoint (infer.mode eval or generate)"};
  JobFlags flags;
  AddJobFlags(app, flags);
  NodeFlags node_flags;
  AddNodeFlags(app, node_flags);
  int metrics_port = 0;
  AddMetricsPortFlag(app, &metrics_port);
  CLI11_PARSE(app, argc, argv);

  const Environment env = CaptureEnvironment(environ);
  JobConfig config;
  JobPlacement placement;
  if (auto code = LoadPlacedJobOrExit(flags, env, "strata-trainer", &config, &placement)) {
    return *code;
  }
  LogOptions log = config.log;
  log.role = "trainer";
  InitLogging(log);
  if (placement.local_task.set()) {
    // A plain `device: cuda` then takes GPU local_task % visible (ChooseCudaDevice).
    config.trainer.train.local_task = placement.local_task.value;
    if (config.trainer.train.device == "cuda") {
      spdlog::info("train.device cuda: GPU {}={} modulo the visible GPUs", placement.local_task.var,
                   placement.local_task.value);
    }
  }
  AutoSelectOptions planner;  // parallel.auto: what the planner needs to know of this host
  planner.cores = static_cast<int>(std::thread::hardware_concurrency());
  if (char host[256] = {}; gethostname(host, sizeof(host) - 1) == 0) planner.host = host;
  // Under strata-launch, progress goes out as @progress lines the launcher folds together.
  const auto progress = env.find("STRATA_PROGRESS");
  const bool launched = progress != env.end() && progress->second == "launcher";
  if (config.trainer.sync.mode == SyncOptions::Mode::kLocal) return Train(config, nullptr, launched, planner, metrics_port);

  InstallStopSignals();
  NodeOptions options;
  if (Status s = PlaceNode(node_flags, placement, Role::kTrainer, &options); !s.ok()) {
    std::cerr << "strata-trainer: " << s.ToString() << "\n";
    return 2;
  }
  options.cluster = config.cluster;
  options.transport = config.transport;
  Node node(options);
  node.OnEvent([](const NodeEvent& e) {
    if (e.kind == NodeEvent::Kind::kDead) spdlog::warn("event: dead {}", e.node.Describe());
  });
  if (ComesBackWhenDeclaredDead(config)) {
    // Stalled past the heartbeat timeout: the servers took nothing of it over, so it registers
    // again and goes on (its clock messages are asked again until then).
    node.OnDeclaredDead([] {}, [] { spdlog::warn("trainer: registered again; training goes on"); });
  }
  if (Status s = node.Join(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return 1;
  }
  SetLogIdentity("trainer", node.rank());
  const int code = Train(config, &node, launched, planner, metrics_port);
  if (code == 0) {
    if (node.rank() == 0) {
      // Every trainer is done (Run's final barrier): end the job for the servers too.
      if (Status s = node.RequestShutdown(); !s.ok()) spdlog::warn("ending the job: {}", s.ToString());
      // The notice comes back to us too; after it, leaving does not wait on the scheduler,
      // which may already be gone.
      node.WaitForShutdown(Millis(10000));
    } else {
      while (!node.WaitForShutdown(Millis(100))) {
        if (StopRequested() || !node.SchedulerStatus().ok()) break;
      }
    }
  }
  // Stopped by a signal: the scheduler may be gone too; do not wait on it long.
  const std::optional<Millis> leave_timeout =
      StopRequested() || !node.SchedulerStatus().ok() ? std::optional<Millis>(Millis(1000)) : std::nullopt;
  if (Status s = node.Leave(leave_timeout); !s.ok()) spdlog::warn("leaving: {}", s.ToString());
  return code;
}
