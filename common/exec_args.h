// exec_args.h: ExecArgs, the argv and envp arrays that an execve(2) after fork(2) needs, built
// before the fork: the child of a threaded process may only call async-signal-safe functions
// until it execs, so it must not allocate them itself.
#pragma once

#include <string>
#include <vector>

namespace strata {

class ExecArgs {
 public:
  // `argv`, and this process's environment with each of `set` ("NAME=value") in place of any
  // value the environment had for NAME.
  ExecArgs(std::vector<std::string> argv, std::vector<std::string> set);
  ExecArgs(const ExecArgs&) = delete;
  ExecArgs& operator=(const ExecArgs&) = delete;

  // Null-terminated, valid while this object lives.
  char* const* argv() { return argv_ptrs_.data(); }
  char* const* envp() { return env_ptrs_.data(); }

 private:
  std::vector<std::string> argv_, env_;
  std::vector<char*> argv_ptrs_, env_ptrs_;
};

}  // namespace strata
