// launch_fixture.cc: LaunchFixture and the metrics and checkpoint readers.
#include "tests/integration/launch_fixture.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <signal.h>

#include "trainer/checkpoint.h"

namespace strata::testing {

std::vector<double> Losses(const std::string& metrics_path) {
  std::vector<double> out;
  std::ifstream in(metrics_path);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("loss")) out.push_back(j["loss"].get<double>());
  }
  return out;
}

double MaxRelativeDifference(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1e-12, std::abs(a[i])));
  }
  return worst;
}

std::map<std::string, std::vector<float>> ReadCheckpoint(const std::string& path) {
  std::map<std::string, std::vector<float>> out;
  auto reader = CheckpointReader::Open(path);
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  if (!reader.ok()) return out;
  for (const auto& [name, info] : reader->tensors()) {
    std::vector<float> v(static_cast<size_t>(ShapeNumel(info.global).value()));
    const Status s = reader->Read(name, ShardSpec::Whole(info.global), v.data());
    EXPECT_TRUE(s.ok()) << s.ToString();
    out[name] = std::move(v);
  }
  return out;
}

std::string LaunchFixture::Job(const std::string& name, const std::string& text) {
  const std::string path = dir_.File(name + ".yaml");
  WriteFile(path, std::string(kFastFailureDetection) + text);
  return path;
}

int LaunchFixture::RunLocal(const std::string& job, const std::vector<std::string>& sets, std::string* log) {
  std::vector<std::string> argv = {BinPath("strata-trainer"), "--config", job};
  for (const auto& s : sets) argv.insert(argv.end(), {"--set", s});
  Subprocess p(argv, dir_.File("local-" + std::to_string(runs_++) + ".log"));
  const int code = p.Wait(Millis(240000));
  *log = p.Log();
  return code;
}

int LaunchFixture::Launch(const std::string& job, int servers, int trainers,
                          const std::vector<std::string>& sets, std::string* log) {
  std::vector<std::string> argv = {BinPath("strata-launch"), "--servers", std::to_string(servers),
                                   "--trainers", std::to_string(trainers), job, "--timeout", "240"};
  for (const auto& s : sets) argv.insert(argv.end(), {"--set", s});
  Subprocess p(argv, dir_.File("launch-" + std::to_string(runs_++) + ".log"));
  const int code = p.Wait(Millis(270000));
  *log = p.Log();
  return code;
}

int LaunchAndKill(const std::vector<std::string>& args, const std::string& victim, const std::string& log_path,
                  std::string* log, int kills, const std::string& ready) {
  using Millis = std::chrono::milliseconds;
  std::vector<std::string> argv = {BinPath("strata-launch")};
  argv.insert(argv.end(), args.begin(), args.end());
  Subprocess launch(argv, log_path);
  const std::regex started_re("started " + victim + " \\(pid ([0-9]+)\\)");
  for (int k = 0; k < kills; ++k) {
    // The k-th process started as `victim` (a restarted one after the first), once progress shows.
    pid_t pid = -1;
    EXPECT_TRUE(testing::WaitFor([&] {
      const std::string l = launch.Log();
      int seen = 0;
      for (auto it = std::sregex_iterator(l.begin(), l.end(), started_re); it != std::sregex_iterator(); ++it) {
        if (seen++ == k) pid = std::stoi((*it)[1]);
      }
      size_t readies = 0;
      for (size_t at = 0; !ready.empty() && (at = l.find(ready, at)) != std::string::npos; ++at) ++readies;
      return pid > 0 && l.find("progress: step") != std::string::npos && (ready.empty() || readies > static_cast<size_t>(k));
    }, Millis(120000))) << launch.Log();
    if (pid > 0) kill(pid, SIGKILL);
  }
  const int code = launch.Wait(Millis(220000));
  *log = launch.Log();
  return code;
}

int RunAndKillATrainer(const std::string& job, int servers, int trainers, int victim_rank,
                       const std::vector<std::string>& sets, const std::string& log_path,
                       std::string* log, std::vector<pid_t>* started, bool keep_going) {
  std::vector<std::string> args = {"--servers", std::to_string(servers), "--trainers", std::to_string(trainers),
                                   job, "--timeout", "200", "--grace-ms", "2000"};
  if (keep_going) args.push_back("--keep-going");
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  const int code = LaunchAndKill(args, "trainer " + std::to_string(victim_rank), log_path, log);
  const std::regex any_started("started [a-z]+ ?[0-9]* \\(pid ([0-9]+)\\)");
  for (auto it = std::sregex_iterator(log->begin(), log->end(), any_started); it != std::sregex_iterator(); ++it) {
    started->push_back(std::stoi((*it)[1]));
  }
  return code;
}

OverlapCount CountAllReduceOverlap(const std::string& trace_path) {
  auto j = nlohmann::json::parse(ReadFile(trace_path));
  std::map<int64_t, double> compute_end, first_ready, first_start;
  auto earliest = [](std::map<int64_t, double>& m, int64_t step, double t) {
    m[step] = m.contains(step) ? std::min(m[step], t) : t;
  };
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X" || !e.contains("args")) continue;
    const int64_t step = e["args"]["step"];
    const std::string name = e["name"];
    const double start = e["ts"], end = start + e["dur"].get<double>();
    if (name == "forward + backward") compute_end[step] = end;
    if (name.rfind("all-reduce bucket", 0) == 0 || name.rfind("reduce-scatter bucket", 0) == 0) {
      earliest(first_start, step, start);  // ZeRO reduce-scatters its buckets
    }
    if (name.rfind("bucket ", 0) == 0 && name.ends_with(" ready")) earliest(first_ready, step, start);
  }
  OverlapCount c;
  c.steps = static_cast<int>(compute_end.size());
  for (const auto& [step, end] : compute_end) {
    if (first_ready.contains(step) && first_ready[step] < end) ++c.handed;
    if (first_start.contains(step) && first_start[step] < end) ++c.started;
  }
  return c;
}

}  // namespace strata::testing
