// child_process.h: ChildProcess, one program strata-bench starts, signals and reaps (the chaos
// campaign kills, stops and restarts the processes of a cluster), its output to a log file and
// OPENBLAS_NUM_THREADS=1 in its environment.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace strata::bench {

class ChildProcess {
 public:
  // Forks and execs argv (argv[0] a path), stdout and stderr appended to `log`.
  static Result<std::unique_ptr<ChildProcess>> Start(const std::vector<std::string>& argv, const std::string& log);
  ~ChildProcess();  // SIGKILLs and reaps a child still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::vector<std::string>& argv() const { return argv_; }
  void Signal(int sig) const;
  // Whether it still runs (reaps it when it has exited).
  bool Running();
  // Waits up to `timeout` for the exit: the exit code, 128 + the signal that killed it, or -1
  // when still running.
  int Wait(std::chrono::milliseconds timeout);
  int exit_code() const { return code_; }  // -1 until reaped

 private:
  ChildProcess(pid_t pid, std::vector<std::string> argv) : pid_(pid), argv_(std::move(argv)) {}
  bool Reap(bool block);

  pid_t pid_;
  std::vector<std::string> argv_;
  int code_ = -1;
};

}  // namespace strata::bench
