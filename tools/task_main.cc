// task_main.cc: strata-task, one task of a job started by a launcher that starts the same
// command N times (srun, a Kubernetes indexed job, torchrun): it learns its task index from
// the environment (tools/placement_env.h), picks its role by the job's rule (task 0 the
// scheduler, the next cluster.servers tasks the servers, the rest the trainers) and becomes
// strata-scheduler, strata-server --rank r or strata-trainer --rank r (exec, same pid):
//   srun -n 4 strata-task -c examples/ctr.yaml --set cluster.servers=1
#include <CLI/CLI.hpp>

#include <unistd.h>  // environ, execv

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "tools/job_config.h"
#include "tools/placement_env.h"

int main(int argc, char** argv) {
  using namespace strata;
  CLI::App app{"strata-task: one task of a job started N times by srun, an indexed job or "
               "torchrun; becomes the scheduler, a server or a trainer by its task index"};
  JobFlags flags;
  AddJobFlags(app, flags);
  bool dry_run = false;
  std::string bin_dir;
  app.add_flag("--dry-run", dry_run, "print the command this task would run, and exit");
  app.add_option("--bin-dir", bin_dir, "where the strata binaries are (default: next to strata-task)");
  CLI11_PARSE(app, argc, argv);

  JobConfig job;
  JobPlacement placement;
  if (auto code = LoadPlacedJobOrExit(flags, CaptureEnvironment(environ), "strata-task", &job,
                                      &placement)) {
    return *code;
  }
  TaskRole task_role;
  if (placement.role.set()) {
    task_role.role = *ParseRole(placement.role.value);
    task_role.rank = placement.rank.set() ? placement.rank.value : -1;
  } else if (placement.task.set()) {
    auto assigned = AssignTaskRole(placement.task.value, job.cluster.servers, job.cluster.trainers);
    if (!assigned.ok()) {
      std::cerr << "strata-task: " << placement.task.var << "=" << placement.task.value << ": "
                << assigned.status().ToString() << "\n";
      return 2;
    }
    task_role = *assigned;
  } else {
    std::cerr << "strata-task: no task index in the environment: run under srun (SLURM_PROCID), "
                 "torchrun (RANK) or set STRATA_TASK (or STRATA_ROLE)\n";
    return 2;
  }

  if (bin_dir.empty()) {
    std::error_code ec;
    bin_dir = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path().string();
    if (ec) bin_dir = ".";
  }
  const std::string binary = "strata-" + std::string(RoleName(task_role.role));
  std::vector<std::string> args = {bin_dir + "/" + binary};
  if (!flags.config_path.empty()) args.insert(args.end(), {"--config", flags.config_path});
  for (const std::string& o : flags.overrides) args.insert(args.end(), {"--set", o});
  // The resolved cluster, so the child sees the same one whatever it would derive itself.
  args.insert(args.end(), {"--set", "cluster.scheduler=" + job.cluster.scheduler, "--set",
                           "cluster.servers=" + std::to_string(job.cluster.servers), "--set",
                           "cluster.trainers=" + std::to_string(job.cluster.trainers)});
  if (task_role.role != Role::kScheduler && task_role.rank >= 0) {
    args.insert(args.end(), {"--rank", std::to_string(task_role.rank)});
  }

  std::string line;
  for (const std::string& a : args) line += (line.empty() ? "" : " ") + a;
  std::cerr << "strata-task: task " << (placement.task.set() ? std::to_string(placement.task.value) : "?")
            << (placement.task.set() ? " (" + placement.task.var + ")" : "") << " is "
            << RoleName(task_role.role) << " " << task_role.rank << ": " << line << "\n";
  if (dry_run) {
    std::cout << line << "\n";
    return 0;
  }
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  execv(cargs[0], cargs.data());
  std::cerr << "strata-task: cannot run " << args[0] << ": " << std::strerror(errno) << "\n";
  return 127;
}
