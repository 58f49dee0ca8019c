// stop_test.cc: SIGTERM ends a cluster's processes mid-training within seconds (issue #16's
// clean stops): a trainer between two steps, with its scheduler alive or killed first, and a
// server whose scheduler is gone.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include "tests/integration/launch_fixture.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using testing::BinPath;
using testing::Subprocess;
using Millis = std::chrono::milliseconds;

const char* kMlp =
    "model: {kind: mlp, mlp_in: 64, mlp_hidden: 128, mlp_out: 16}\n"
    "data: {kind: regression, eval_samples: 256}\n"
    "optimizer: {kind: sgd, lr: 0.05}\n"
    "train: {steps: 1000000, batch_size: 64, log_every: 1, progress: false}\n";

class StopTest : public testing::LaunchFixture {
 protected:
  // Launches the job for good (a million steps), waits until it trains, kills `first` (if any)
  // with SIGKILL, then sends SIGTERM to `victim`; returns the seconds until `victim` was gone.
  double StopOne(const std::string& job, int servers, const std::vector<std::string>& sets, const std::string& first,
                 const std::string& victim, std::string* log) {
    std::vector<std::string> argv = {BinPath("strata-launch"), "--servers", std::to_string(servers), "--trainers", "2",
                                     job, "--timeout", "120", "--grace-ms", "20000", "--keep-going"};
    for (const auto& s : sets) argv.insert(argv.end(), {"--set", s});
    Subprocess launch(argv, dir_.File("launch-" + std::to_string(runs_++) + ".log"));
    auto pid_of = [&](const std::string& who) {
      std::smatch m;
      const std::string l = launch.Log();
      if (!std::regex_search(l, m, std::regex("started " + who + " \\(pid ([0-9]+)\\)"))) return -1;
      return std::stoi(m[1]);
    };
    EXPECT_TRUE(testing::WaitFor([&] { return launch.Log().find("progress: step") != std::string::npos; },
                                 Millis(60000))) << launch.Log();
    if (!first.empty()) {
      const int pid = pid_of(first);
      EXPECT_GT(pid, 0) << launch.Log();
      if (pid > 0) kill(pid, SIGKILL);
      std::this_thread::sleep_for(Millis(500));
    }
    const int pid = pid_of(victim);
    EXPECT_GT(pid, 0) << launch.Log();
    const auto start = std::chrono::steady_clock::now();
    if (pid > 0) kill(pid, SIGTERM);
    // Gone: exited and reaped by the launcher.
    EXPECT_TRUE(testing::WaitFor([&] { return pid > 0 && kill(pid, 0) != 0; }, Millis(30000))) << launch.Log();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    kill(launch.pid(), SIGTERM);
    launch.Wait(Millis(60000));
    *log = launch.Log();
    return seconds;
  }
};

TEST_F(StopTest, SigtermStopsAClusterTrainerWithinFiveSeconds) {
  std::string log;
  const double s = StopOne(Job("mlp", kMlp), 0, {"sync.mode=allreduce"}, "", "trainer 1", &log);
  EXPECT_LT(s, 5.0) << log;
  EXPECT_NE(log.find("stopped by a signal"), std::string::npos) << log;
}

TEST_F(StopTest, SigtermStopsATrainerWhoseSchedulerIsGone) {
  std::string log;
  const double s = StopOne(Job("mlp", kMlp), 1, {"sync.mode=ps", "sync.consistency=asp"}, "scheduler", "trainer 0", &log);
  EXPECT_LT(s, 5.0) << log;
  EXPECT_NE(log.find("stopped by a signal"), std::string::npos) << log;
}

TEST_F(StopTest, SigtermStopsAServerWhoseSchedulerIsGone) {
  std::string log;
  const double s = StopOne(Job("mlp", kMlp), 1, {"sync.mode=ps", "sync.consistency=asp"}, "scheduler", "server 0", &log);
  EXPECT_LT(s, 5.0) << log;
}

}  // namespace
}  // namespace strata
