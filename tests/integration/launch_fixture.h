// launch_fixture.h: what the end-to-end training tests share: a fixture that runs
// strata-trainer alone or strata-launch with a job, and readers of the metrics and checkpoint
// files the runs leave.
#pragma once

#include <gtest/gtest.h>

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace strata::testing {

// Failure detection fast enough for a test, slow enough not to misfire on a loaded CI machine.
inline constexpr const char* kFastFailureDetection =
    "cluster: {heartbeat_interval_ms: 200, heartbeat_timeout_ms: 2500}\n";

// The "loss" of every line of a JSON-lines metrics file that has one.
std::vector<double> Losses(const std::string& metrics_path);
double MaxRelativeDifference(const std::vector<double>& a, const std::vector<double>& b);
// Every tensor of a trainer checkpoint (trainer/checkpoint.h: a step directory, a
// checkpoint_dir's latest or a full-model file), unsplit, by name.
std::map<std::string, std::vector<float>> ReadCheckpoint(const std::string& path);

// Runs strata-launch with `args` and SIGKILLs the process it started as `victim` ("trainer 1",
// "scheduler") once progress shows, and then `kills` - 1 times the next process it starts under
// that name (a restarted scheduler), the k-th (from 0) once `ready` (if not empty) has appeared
// more than k times; returns the launcher's exit code and its log in *log.
int LaunchAndKill(const std::vector<std::string>& args, const std::string& victim, const std::string& log_path,
                  std::string* log, int kills = 1, const std::string& ready = "");

// Runs strata-launch with the job on `servers` and `trainers` and SIGKILLs trainer `victim_rank`
// once progress shows; returns the launcher's exit code, its log in *log and the pid of every
// process it started in *started.
int RunAndKillATrainer(const std::string& job, int servers, int trainers, int victim_rank,
                       const std::vector<std::string>& sets, const std::string& log_path,
                       std::string* log, std::vector<pid_t>* started, bool keep_going);

// What a trainer's Chrome trace (sync.trace_path) shows of the all-reduce's (ZeRO: the
// reduce-scatter's) overlap with compute.
struct OverlapCount {
  int steps = 0;      // steps with a "forward + backward" event
  int handed = 0;     // steps where backward handed a bucket over ("bucket N ready") before it ended
  int started = 0;    // steps where a bucket's all-reduce started before backward ended
};
OverlapCount CountAllReduceOverlap(const std::string& trace_path);

class LaunchFixture : public ::testing::Test {
 protected:
  using Millis = std::chrono::milliseconds;
  // Writes the job (after kFastFailureDetection) to the test's directory; returns its path.
  std::string Job(const std::string& name, const std::string& text);
  // Runs strata-trainer alone with the job; returns its exit code and its log in *log.
  int RunLocal(const std::string& job, const std::vector<std::string>& sets, std::string* log);
  // Runs strata-launch with the job on `servers` and `trainers`.
  int Launch(const std::string& job, int servers, int trainers, const std::vector<std::string>& sets,
             std::string* log);
  // A metrics path with "{rank}" for the trainers to fill in, and rank `rank`'s file.
  std::string Metrics(const std::string& tag) { return dir_.File("metrics-" + tag + "-{rank}.jsonl"); }
  std::string Rank(const std::string& tag, int rank) {
    return dir_.File("metrics-" + tag + "-" + std::to_string(rank) + ".jsonl");
  }

  TempDir dir_;
  int runs_ = 0;
};

}  // namespace strata::testing
