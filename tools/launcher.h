// launcher.h: Launcher, which runs a whole cluster on this machine: the scheduler (on a free
// port), then S servers and W trainers pointed at it. Their output is streamed with a
// "[server 1] " prefix. If any process fails, or on Ctrl-C, everything is stopped (SIGTERM,
// then SIGKILL after a grace period); children also die with the launcher (PDEATHSIG), so no
// process is left behind.
#pragma once

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace strata {

struct LaunchOptions {
  int servers = 1;
  int trainers = 1;
  std::string config_path;             // passed to every process as --config
  std::vector<std::string> overrides;  // passed to every process as --set
  std::string bin_dir;                 // where strata-scheduler and the node binaries are
  std::vector<std::string> server_command = {"strata-node", "--role", "server"};
  std::vector<std::string> trainer_command = {"strata-node", "--role", "trainer"};
  int grace_ms = 3000;    // between SIGTERM and SIGKILL when stopping
  int timeout_s = 0;      // stop the job after this long; 0: no limit
};

// Not thread-safe: one thread calls Run().
class Launcher {
 public:
  explicit Launcher(LaunchOptions options);
  ~Launcher();

  // Runs the job to its end. Returns the process exit code: 0 if every process exited 0,
  // 1 if any failed (the first failure is logged by name), 130 if interrupted.
  int Run();

 private:
  struct Child {
    std::string name;  // "scheduler", "server 0", "trainer 3"
    pid_t pid = -1;
    int exit_code = -1;  // exit status, or 128 + signal
    bool running = false;
    std::thread reader;
  };

  Status Spawn(const std::string& name, std::vector<std::string> argv);
  Result<std::string> WaitForSchedulerAddress(const std::string& path);
  void Reap();  // collects exit codes of finished children
  void StopAll();
  bool AnyRunning() const;

  const LaunchOptions options_;
  std::string work_dir_;
  std::vector<std::unique_ptr<Child>> children_;
  std::mutex out_mu_;
};

}  // namespace strata
