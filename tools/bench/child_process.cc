// child_process.cc: ChildProcess (child_process.h).
#include "tools/bench/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "common/exec_args.h"

namespace strata::bench {

Result<std::unique_ptr<ChildProcess>> ChildProcess::Start(const std::vector<std::string>& argv,
                                                          const std::string& log) {
  if (argv.empty()) return Status::InvalidArgument("an empty command");
  if (access(argv[0].c_str(), X_OK) != 0) return Status::NotFound("no executable at " + argv[0]);
  ExecArgs exec(argv, {"OPENBLAS_NUM_THREADS=1"});
  // Everything the child needs is built above: between fork and exec it only calls
  // async-signal-safe functions.
  const pid_t pid = fork();
  if (pid < 0) return Status::IOError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execve(exec.argv()[0], exec.argv(), exec.envp());
    _exit(127);
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, argv));
}

ChildProcess::~ChildProcess() {
  if (Running()) {
    Signal(SIGKILL);
    Reap(/*block=*/true);
  }
}

void ChildProcess::Signal(int sig) const {
  if (code_ < 0) kill(pid_, sig);
}

bool ChildProcess::Reap(bool block) {
  if (code_ >= 0) return true;
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r != pid_) return false;
  code_ = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 255;
  return true;
}

bool ChildProcess::Running() { return !Reap(/*block=*/false); }

int ChildProcess::Wait(std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!Reap(/*block=*/false)) {
    if (std::chrono::steady_clock::now() >= end) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return code_;
}

}  // namespace strata::bench
