// test_util.cc: test helpers.
#include "test_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/exec_args.h"

namespace strata::testing {

std::string BinPath(const std::string& name) { return std::string(STRATA_BIN_DIR) + "/" + name; }

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base && *base ? base : "/tmp") + "/strata-test-XXXXXX";
  char* made = mkdtemp(templ.data());
  path_ = made ? made : "";
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string WordCorpus() {
  static const char* kWords[] = {"the", "model", "shards", "its", "state", "over", "replicas", "and", "each",
                                 "rank", "updates", "a", "slice", "of", "every", "bucket", "then", "gathers",
                                 "parameters", "gradients", "are", "reduced", "while", "backward", "runs"};
  std::string text;
  uint64_t x = 12345;
  while (text.size() < 16384) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    text += kWords[(x >> 33) % (sizeof(kWords) / sizeof(kWords[0]))];
    text += (x >> 20) % 9 == 0 ? ".\n" : " ";
  }
  return text;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

Subprocess::Subprocess(std::vector<std::string> argv, std::string log_path)
    : log_path_(std::move(log_path)) {
  // One OpenBLAS thread in every child: a GEMM's sums split over threads round differently, so
  // processes started one by one (the environment's default: every core) would not compute the
  // floats that strata-launch's trainers (cores / trainers threads) or a reference run compute.
  ExecArgs exec(std::move(argv), {"OPENBLAS_NUM_THREADS=1"});
  pid_ = fork();
  if (pid_ == 0) {
    int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execve(exec.argv()[0], exec.argv(), exec.envp());
    _exit(127);
  }
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
  }
}

void Subprocess::Signal(int sig) {
  if (pid_ > 0 && !reaped_) kill(pid_, sig);
}

bool Subprocess::running() {
  if (reaped_) return false;
  pid_t r = waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) reaped_ = true;
  return !reaped_;
}

int Subprocess::Wait(std::chrono::milliseconds timeout) {
  if (!WaitFor([this] { return !running(); }, timeout)) return -1;
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

}  // namespace strata::testing
