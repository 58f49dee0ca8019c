// bench_jobs.cc: what the subcommands that run real jobs share (bench.h): the text they train on,
// their work directory, launching a program with its output in a log, the gpt shape flags, and
// whether a Python has PyTorch for a peer.
#include <CLI/CLI.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tools/bench/bench.h"
#include "tools/bench/child_process.h"

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
  std::ofstream(log, std::ios::trunc);  // a fresh log: ChildProcess appends
  STRATA_ASSIGN_OR_RETURN(auto child, ChildProcess::Start(args, log.string()));
  int code;
  while ((code = child->Wait(std::chrono::hours(1))) < 0) {
  }
  if (code == 0) return Status::OK();
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() > 3000) text = "..." + text.substr(text.size() - 3000);
  return Status::Internal(std::filesystem::path(args[0]).filename().string() + " exited with status " +
                          std::to_string(code) + " (log " + log.string() + "):\n" + text);
}

std::string GptShape::ModelYaml(int64_t vocab) const {
  std::ostringstream y;
  y << "{kind: gpt, layers: " << layers << ", heads: " << heads << ", width: " << width << ", context: " << context
    << ", vocab: " << vocab << "}";
  return y.str();
}

nlohmann::json GptShape::ToJson(int64_t vocab) const {
  return {{"kind", "gpt"}, {"layers", layers}, {"width", width}, {"heads", heads}, {"context", context}, {"vocab", vocab}};
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
