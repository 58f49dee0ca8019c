// trainer_main.cc: strata-trainer, trains one model in one process from a job file:
//   strata-trainer --config examples/mlp.yaml [--set train.steps=100] [--print-config]
#include <CLI/CLI.hpp>

#include <iostream>

#include "common/logging.h"
#include "trainer/trainer.h"

int main(int argc, char** argv) {
  CLI::App app{"strata-trainer: trains a model (mlp, gpt, ctr) in one process"};
  std::string config_path;
  std::vector<std::string> overrides;
  bool print_config = false;
  app.add_option("--config,-c", config_path, "job file (YAML)")->check(CLI::ExistingFile);
  app.add_option("--set", overrides, "override a job field: KEY=VALUE (repeatable)");
  app.add_flag("--print-config", print_config, "print the effective job and exit");
  app.footer("Job fields:\n" + strata::config::Describe<strata::TrainJob>());
  CLI11_PARSE(app, argc, argv);

  strata::Result<strata::TrainJob> job = strata::LoadTrainJob(config_path, overrides);
  if (!job.ok()) {
    std::cerr << job.status().ToString() << "\n";
    return 2;
  }
  if (print_config) {
    std::cout << strata::config::ToYaml(*job) << "\n";
    return 0;
  }
  strata::LogOptions log = job->log;
  log.role = "trainer";
  strata::InitLogging(log);
  auto trainer = strata::Trainer::Create(*job);
  if (!trainer.ok()) {
    spdlog::error("{}", trainer.status().ToString());
    return 1;
  }
  spdlog::info("model has {} parameters", (*trainer)->model().params().NumElements());
  auto summary = (*trainer)->Run();
  if (!summary.ok()) {
    spdlog::error("{}", summary.status().ToString());
    return 1;
  }
  const strata::EvalMetrics& e = summary->eval;
  if (e.auc >= 0) {
    spdlog::info("done: {} steps in {:.1f}s, eval loss {:.5f}, auc {:.4f} (oracle {:.4f})",
                 summary->losses.size(), summary->seconds, e.loss, e.auc, e.oracle_auc);
  } else {
    spdlog::info("done: {} steps in {:.1f}s, eval loss {:.5f}", summary->losses.size(),
                 summary->seconds, e.loss);
  }
  return 0;
}
