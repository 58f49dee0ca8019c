// launch_main.cc: strata-launch, the one-command way to run a job on one machine (like torchrun).
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <sstream>

#include "tools/job_config.h"

#include "tools/launcher.h"
#include "trainer/parallel/plan.h"

int main(int argc, char** argv) {
  using namespace strata;
  CLI::App app{"strata-launch: runs a whole strata cluster on this machine (scheduler, servers, "
               "trainers on loopback), streams their logs, stops everything if one fails"};
  LaunchOptions o;
  std::string config_path;
  app.add_option("--servers,-s", o.servers, "number of servers")->check(CLI::Range(0, 256));
  app.add_option("--trainers,-t", o.trainers, "number of trainers")->check(CLI::Range(1, 256));
  app.add_option("job", o.config_path, "job file (YAML)")->check(CLI::ExistingFile);
  app.add_option("--set", o.overrides, "override a job field, KEY=VALUE (repeatable)");
  app.add_option("--grace-ms", o.grace_ms, "time between SIGTERM and SIGKILL when stopping")
      ->check(CLI::Range(0, 600000));
  app.add_option("--timeout", o.timeout_s, "stop the job after this many seconds (0: never)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--log", o.log_path,
                 "write every process's output to this file; the screen keeps the set-up lines, "
                 "warnings and errors, the progress line and the summary table");
  app.add_option("--server-command", o.server_command, "server program and its arguments (one string is split at spaces)");
  app.add_option("--trainer-command", o.trainer_command, "trainer program and its arguments (one string is split at spaces)");
  app.add_option("--scheduler-restarts", o.scheduler_restarts,
                 "start a scheduler that dies mid-job (a crash, kill -9) again at its address, this many times "
                 "in all; the nodes re-register with it (0: its death stops the job)")
      ->check(CLI::Range(0, 1000));
  app.add_flag("--keep-going", o.keep_going,
               "a failed trainer (other than 0) does not stop the others; on by default for "
               "asynchronous jobs (sync.mode ps or hybrid with consistency asp)");
  CLI11_PARSE(app, argc, argv);

  // A command given as one string ("strata-node --role server") is split at spaces.
  for (auto* command : {&o.server_command, &o.trainer_command}) {
    if (command->size() != 1) continue;
    std::istringstream words(command->front());
    command->clear();
    for (std::string w; words >> w;) command->push_back(w);
  }
  // Check the job here, once, rather than in every process.
  std::vector<std::string> overrides = o.overrides;
  overrides.push_back("cluster.servers=" + std::to_string(o.servers));
  overrides.push_back("cluster.trainers=" + std::to_string(o.trainers));
  auto job = LoadJobConfig(o.config_path, overrides);
  if (!job.ok()) {
    std::cerr << "strata-launch: " << job.status().ToString() << "\n";
    return 2;
  }
  const SyncOptions::Mode mode = job->trainer.sync.mode;
  const bool real_trainers = o.trainer_command == LaunchOptions().trainer_command;
  if (real_trainers && mode == SyncOptions::Mode::kLocal) {
    std::cerr << "strata-launch: sync.mode is local (one trainer, no cluster); set sync.mode to "
                 "allreduce, ps, hybrid or offload (e.g. --set sync.mode=allreduce), or run strata-trainer "
                 "alone\n";
    return 2;
  }
  if (real_trainers) {
    // The parallel plan (dp x tp x pp against the trainers, the schedule, the partition).
    Result<ParallelPlan> plan = ResolvePlan(job->trainer, o.trainers);
    if (!plan.ok()) {
      std::cerr << "strata-launch: " << plan.status().ToString() << "\n";
      return 2;
    }
    if (job->trainer.train.batch_size % plan->dp != 0) {
      std::cerr << "strata-launch: train.batch_size " << job->trainer.train.batch_size
                << " (the global micro-batch) must be divisible by the " << plan->dp
                << " data-parallel replicas\n";
      return 2;
    }
  }
  if (real_trainers && UsesServers(mode) && o.servers == 0) {
    std::cerr << "strata-launch: sync.mode " << ModeName(mode)
              << " needs at least one server (--servers)\n";
    return 2;
  }
  if (UsesServers(mode) && job->trainer.sync.consistency == Consistency::kAsp) o.keep_going = true;
  o.bin_dir = std::filesystem::canonical("/proc/self/exe").parent_path().string();
  return Launcher(o).Run();
}
