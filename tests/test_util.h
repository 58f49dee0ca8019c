// test_util.h: helpers shared by tests: temporary directories, child processes with captured
// output, and polling waits (no sleeps-as-synchronisation in tests).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace strata::testing {

// Path of a built binary, e.g. BinPath("strata-scheduler").
std::string BinPath(const std::string& name);

// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path);
// 16 KiB of lower-case words and punctuation drawn by a fixed generator: training text for
// equivalence tests that does not change when the repository's files do (an edit to a README
// moves a trajectory, and AdamW magnifies ulps on near-zero gradients).
std::string WordCorpus();
void WriteFile(const std::string& path, const std::string& text);

// Polls `cond` every few milliseconds until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds timeout);

// A child process (OPENBLAS_NUM_THREADS=1) whose stdout and stderr go to a log file. Killed (SIGKILL) and reaped on
// destruction if still running.
class Subprocess {
 public:
  Subprocess(std::vector<std::string> argv, std::string log_path);
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // Waits for exit; returns the exit code, 128+signal if killed, -1 on timeout.
  int Wait(std::chrono::milliseconds timeout);
  bool running();
  std::string Log() const { return ReadFile(log_path_); }
  const std::string& log_path() const { return log_path_; }

 private:
  pid_t pid_ = -1;
  int status_ = -1;
  bool reaped_ = false;
  std::string log_path_;
};

}  // namespace strata::testing
