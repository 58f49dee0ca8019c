// bench_jobs.cc: what the subcommands that run real jobs share (bench.h): the text they train on,
// their work directory, launching a program with its output in a log, the gpt shape flags, and
// whether a Python has PyTorch for a peer.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tools/bench/bench.h"

extern char** environ;

namespace strata::bench {

// Where the text comes from: --data, or (when that file is missing) a generated one.
Result<std::string> TextDataPath(const std::string& data, const std::filesystem::path& dir) {
  if (std::filesystem::exists(data)) return data;
  const std::filesystem::path path = dir / "text.txt";
  std::ofstream out(path);
  static const char* kWords[] = {"the",        "pipeline", "stage", "sends",     "an",
                                 "activation", "to",       "its",   "neighbour", "and",
                                 "waits",      "for",      "a",     "gradient"};
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 40000; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    out << kWords[x % std::size(kWords)] << (i % 12 == 11 ? ".\n" : " ");
  }
  if (!out) return Status::IOError("cannot write " + path.string());
  return path.string();
}

// A fresh work directory holding the text data and the job file (bench.h).
Result<JobWorkDir> MakeJobWorkDir(const std::string& name, const std::string& data,
                                  const std::function<std::string(const std::string& data_path)>& yaml) {
  JobWorkDir d;
  d.launch = std::filesystem::canonical("/proc/self/exe").parent_path().string() + "/strata-launch";
  if (!std::filesystem::exists(d.launch)) return Status::NotFound(d.launch + " (build the strata-launch target)");
  std::string tmpl = "/tmp/strata-bench-" + name + "-XXXXXX";
  if (!mkdtemp(tmpl.data())) return Status::IOError(std::string("mkdtemp: ") + std::strerror(errno));
  d.work = tmpl;
  STRATA_ASSIGN_OR_RETURN(d.data_path, TextDataPath(data, d.work));
  d.job_path = d.work / "job.yaml";
  std::ofstream out(d.job_path);
  out << yaml(d.data_path);
  if (!out) return Status::IOError("cannot write " + d.job_path.string());
  return d;
}

void FinishWorkDir(const std::filesystem::path& work, bool keep, std::vector<std::string>* notes) {
  if (keep) {
    notes->push_back("work directory kept: " + work.string());
    return;
  }
  std::error_code ec;
  std::filesystem::remove_all(work, ec);
}

Status LaunchJob(const std::vector<std::string>& args, const std::filesystem::path& log) {
  std::vector<std::string> env_text = {"OPENBLAS_NUM_THREADS=1"};
  for (char** e = environ; *e; ++e) {
    if (std::string_view(*e).starts_with("OPENBLAS_NUM_THREADS=")) continue;
    env_text.push_back(*e);
  }
  std::vector<char*> argv, envp;
  std::vector<std::string> args_copy = args;
  for (auto& a : args_copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string log_path = log.string();
  // Everything the child needs is built above: between fork and exec it only calls
  // async-signal-safe functions.
  const pid_t pid = fork();
  if (pid < 0) return Status::IOError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::OK();
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() > 3000) text = "..." + text.substr(text.size() - 3000);
  return Status::Internal(std::filesystem::path(args[0]).filename().string() + " exited with status " +
                          std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + " (log " +
                          log_path + "):\n" + text);
}

std::string GptShape::ModelYaml(int64_t vocab) const {
  std::ostringstream y;
  y << "{kind: gpt, layers: " << layers << ", heads: " << heads << ", width: " << width << ", context: " << context
    << ", vocab: " << vocab << "}";
  return y.str();
}

nlohmann::json GptShape::ToJson() const {
  return {{"kind", "gpt"}, {"layers", layers}, {"width", width}, {"heads", heads}, {"context", context}};
}

void AddGptShapeOptions(CLI::App& app, GptShape& s) {
  app.add_option("--layers", s.layers, "gpt blocks")->capture_default_str();
  app.add_option("--width", s.width, "gpt width")->capture_default_str();
  app.add_option("--heads", s.heads, "gpt attention heads")->capture_default_str();
  app.add_option("--context", s.context, "gpt context (sequence length)")->capture_default_str();
}

bool PythonHasTorch(const std::string& python, const std::filesystem::path& log) {
  return std::filesystem::exists(python) && LaunchJob({python, "-c", "import torch"}, log).ok();
}

}  // namespace strata::bench
