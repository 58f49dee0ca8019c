// launcher.h: Launcher, which runs a whole cluster on this machine: the scheduler (on a free
// port), then S strata-server and W strata-trainer processes pointed at it. Their output is
// streamed with a "[server 1] " prefix; the trainers' progress reports (STRATA_PROGRESS=launcher
// makes them print "@progress {json}" lines) are folded into one progress line. If any process
// fails, or on Ctrl-C, everything is stopped (SIGTERM, then SIGKILL after a grace period);
// children also die with the launcher (PDEATHSIG), so no process is left behind. The one
// exception is asynchronous training (sync.mode ps, consistency asp, or --keep-going): a lost
// trainer is reported and the others finish without it; the job still exits non-zero. A
// scheduler that dies mid-job is started again at the same address, up to
// LaunchOptions::scheduler_restarts times: the nodes re-register with it (docs/reliability.md).
// At the end it prints a table of its processes and trainer 0's figures (launch_report.h).
// With a log file, every line goes there and the screen keeps what people read: its own set-up
// lines, the children's warnings and errors, a few of trainer 0's set-up lines, the progress
// line and the table.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "tools/launch_report.h"

namespace strata {

struct LaunchOptions {
  int servers = 1;
  int trainers = 1;
  std::string config_path;             // passed to every process as --config
  std::vector<std::string> overrides;  // passed to every process as --set
  std::string bin_dir;                 // where strata-scheduler and the node binaries are
  std::vector<std::string> server_command = {"strata-server"};
  std::vector<std::string> trainer_command = {"strata-trainer"};
  bool keep_going = false;  // a failed trainer does not stop the others (set for ASP jobs)
  int grace_ms = 3000;    // between SIGTERM and SIGKILL when stopping
  int timeout_s = 0;      // stop the job after this long; 0: no limit
  // A scheduler that exits non-zero (a crash, kill -9) while the job runs is started again at
  // its address this many times in all; past that, or with 0, its failure stops the job.
  // Each restart must come within cluster.scheduler_timeout_ms of the death.
  int scheduler_restarts = 3;
  // Every process's output, in full; empty: it all goes to the screen.
  std::string log_path;
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
    std::chrono::steady_clock::time_point started;
    double wall_seconds = 0;
    long peak_rss_kib = 0;  // VmHWM sampled from /proc while it runs (wait4's as a fallback)
    std::deque<std::string> tail;  // its last kTailLines lines (under out_mu_), shown if it fails
    std::thread reader;
    bool replaced = false;  // a dead scheduler started again: its exit does not fail the job
  };

  Status Spawn(const std::string& name, std::vector<std::string> argv);
  static constexpr size_t kTailLines = 15;
  // A line from `from` (nullptr: the launcher's own).
  void OnLine(const std::string& prefix, const std::string& line, Child* from = nullptr);
  // With a log file: the failed child's last lines on the screen (the log has them all).
  void ShowTail(Child& child);
  // Whether a child's line goes to the screen too when there is a log file.
  static bool ForScreen(const std::string& prefix, const std::string& line);
  void PrintReport();
  void ShowProgressLocked(bool force);
  std::string ProgressLineLocked() const;
  // Waits for `scheduler` (a child) to write its address to `path`.
  Result<std::string> WaitForSchedulerAddress(const std::string& path, const Child& scheduler);
  // Starts the scheduler: at a free port the first time, at `address` after a crash.
  Status SpawnScheduler(const std::string& bind);
  // The scheduler died mid-job: starts it again at its address if restarts are left. OK: it
  // runs again (or is not needed any more); else why the job must stop.
  Status RestartScheduler(Child& dead);
  void Reap();  // collects exit codes of finished children
  void StopAll();
  bool AnyRunning() const;
  void SampleMemory();  // each running child's VmHWM into peak_rss_kib

  const LaunchOptions options_;
  std::string work_dir_;
  std::string scheduler_address_;
  std::vector<std::string> common_args_;  // every process's --config and --set
  int scheduler_restarts_ = 0;
  std::vector<std::unique_ptr<Child>> children_;
  std::mutex out_mu_;
  // Progress (under out_mu_): the latest report of each trainer rank.
  struct Progress {
    int64_t step = 0, steps = 0;
    double loss = 0, samples_per_s = 0, eta_s = 0;
  };
  std::vector<Progress> progress_;
  std::optional<JobReport> job_report_;  // trainer 0's @summary
  FILE* log_ = nullptr;                  // options_.log_path, open during Run()
  bool tty_ = false;
  bool finished_ = false;        // the job ended: the progress line is not drawn again
  bool progress_shown_ = false;  // a progress line is on the terminal (tty) and must be cleared
  std::chrono::steady_clock::time_point last_progress_{};
};

}  // namespace strata
