// launch_main.cc: strata-launch, the one-command way to run a job on one machine (like torchrun).
#include <CLI/CLI.hpp>

#include <filesystem>

#include "tools/launcher.h"

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
  app.add_option("--server-command", o.server_command, "server program and its arguments");
  app.add_option("--trainer-command", o.trainer_command, "trainer program and its arguments");
  CLI11_PARSE(app, argc, argv);
  o.bin_dir = std::filesystem::canonical("/proc/self/exe").parent_path().string();
  return Launcher(o).Run();
}
