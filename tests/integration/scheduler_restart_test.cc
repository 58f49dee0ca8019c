// scheduler_restart_test.cc: issue #16's restartable scheduler with real processes on loopback:
// ctr in ps mode (1 server, 2 trainers, started one by one as compose or Slurm would) whose
// scheduler is killed with SIGKILL mid-training and started again at the same address; the
// nodes re-register and training finishes every step with a sane AUC. Without a restart the
// nodes exit within cluster.scheduler_timeout_ms naming the scheduler. strata-launch does the
// restart itself (--scheduler-restarts), within its bound.
#include <gtest/gtest.h>
#include <signal.h>

#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "tests/integration/process_cluster.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using testing::Subprocess;
using testing::WaitFor;

const char* kCtr =
    "model: {kind: ctr, fields: 8, field_vocab: 300, embed_dim: 8, ctr_hidden: 32}\n"
    "data: {kind: click_log, eval_samples: 20000}\n"
    "optimizer: {kind: adamw, lr: 0.01}\n"
    "sync: {mode: ps, consistency: bsp}\n"
    "train: {steps: 1500, batch_size: 256, log_every: 25, progress: false}\n";

class SchedulerRestartTest : public testing::ProcessClusterTest {
 protected:
  std::vector<std::string> Common(const std::string& job, int scheduler_timeout_ms) {
    return {"--config", job, "--set", "cluster.servers=1", "--set", "cluster.trainers=2",
            "--set", "cluster.scheduler_timeout_ms=" + std::to_string(scheduler_timeout_ms),
            "--set", "train.metrics_path=" + Metrics("run")};
  }
  size_t MetricsLines() { return ProcessClusterTest::MetricsLines("run"); }
};

TEST_F(SchedulerRestartTest, TrainingContinuesAcrossASchedulerKilledAndRestarted) {
  const auto common = Common(Job("ctr", kCtr), 30000);
  const std::string address = StartScheduler(common, "tcp://127.0.0.1:0");
  Subprocess& server = Start("strata-server", common, address, 0);
  Subprocess& t0 = Start("strata-trainer", common, address, 0);
  Subprocess& t1 = Start("strata-trainer", common, address, 1);
  ASSERT_TRUE(WaitFor([&] { return MetricsLines() >= 2; }, Millis(120000))) << t0.Log();
  schedulers_[0]->Signal(SIGKILL);
  ASSERT_EQ(schedulers_[0]->Wait(Millis(10000)), 128 + SIGKILL);
  const size_t at_kill = MetricsLines();
  EXPECT_LT(at_kill, 1500u / 25) << "the scheduler was killed after training ended: make the job longer";
  // Nodes ride the outage (their heartbeats fail), then the scheduler comes back where it was.
  std::this_thread::sleep_for(Millis(1000));
  ASSERT_EQ(StartScheduler(common, address), address);

  for (Subprocess* n : {&t0, &t1, &server}) {
    EXPECT_EQ(n->Wait(Millis(180000)), 0) << n->Log();
  }
  EXPECT_EQ(schedulers_[1]->Wait(Millis(20000)), 0) << schedulers_[1]->Log();
  for (Subprocess* n : {&t0, &t1, &server}) {
    EXPECT_NE(n->Log().find("re-registered with the restarted scheduler"), std::string::npos) << n->Log();
  }
  const std::string restarted = schedulers_[1]->Log();
  EXPECT_NE(restarted.find("restarted mid-job: rebuilt the membership"), std::string::npos) << restarted;
  EXPECT_NE(restarted.find("(0 live nodes still to come back)"), std::string::npos) << restarted;
  const std::string log = t0.Log();
  EXPECT_NE(log.find("done: 1500 steps"), std::string::npos) << log;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("auc ([0-9.]+) \\(oracle"))) << log;
  EXPECT_GT(std::stod(m[1]), 0.75) << log;  // the planted model was learnt (chance is 0.5)
}

// No restart: every node gives up within cluster.scheduler_timeout_ms with an error naming the
// scheduler, instead of retrying forever.
TEST_F(SchedulerRestartTest, WithoutARestartTheNodesExitNamingTheScheduler) {
  const auto common = Common(Job("ctr", kCtr), 3000);
  const std::string address = StartScheduler(common, "tcp://127.0.0.1:0");
  Subprocess& server = Start("strata-server", common, address, 0);
  Subprocess& t0 = Start("strata-trainer", common, address, 0);
  Subprocess& t1 = Start("strata-trainer", common, address, 1);
  ASSERT_TRUE(WaitFor([&] { return MetricsLines() >= 1; }, Millis(120000))) << t0.Log();
  schedulers_[0]->Signal(SIGKILL);
  for (Subprocess* n : {&t0, &t1, &server}) {
    const int code = n->Wait(Millis(60000));
    EXPECT_NE(code, 0) << n->Log();
    EXPECT_NE(code, -1) << "still running: " << n->Log();
    EXPECT_NE(n->Log().find("lost the scheduler at " + address), std::string::npos) << n->Log();
  }
}

// strata-launch restarts its own scheduler, killed with SIGKILL mid-job, at the same address;
// the job finishes every step. Returns the launcher's exit code and its output in *log.
int LaunchAndKillTheScheduler(const std::string& job, int restarts, const std::string& log_path, std::string* log,
                              int kills = 1) {
  return testing::LaunchAndKill({"--servers", "1", "--trainers", "2", job, "--timeout", "200", "--scheduler-restarts",
                                 std::to_string(restarts), "--set", "train.progress=true"},
                                "scheduler", log_path, log, kills, "scheduler: listening on");
}

TEST_F(SchedulerRestartTest, TheLauncherRestartsItsSchedulerAndTheJobFinishes) {
  std::string log;
  EXPECT_EQ(LaunchAndKillTheScheduler(Job("ctr", kCtr), 2, dir_.File("launch.log"), &log), 0) << log;
  const std::regex restarted("the scheduler \\(pid [0-9]+\\) exited with signal 9; starting it again at "
                             "(tcp://127\\.0\\.0\\.1:[0-9]+) \\(restart 1 of at most 2\\)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, restarted)) << log;
  // Both schedulers listened there: the first, and the restarted one.
  const std::string listening = "scheduler: listening on " + m[1].str() + ",";
  const size_t first = log.find(listening);
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_NE(log.find(listening, first + 1), std::string::npos) << "not restarted at the same address:\n" << log;
  EXPECT_NE(log.find("restarted mid-job: rebuilt the membership"), std::string::npos) << log;
  for (const char* node : {"[server 0]", "[trainer 0]", "[trainer 1]"}) {
    const std::regex rejoined(std::string("\\") + node + " .*re-registered with the restarted scheduler");
    EXPECT_TRUE(std::regex_search(log, rejoined)) << node << "\n" << log;
  }
  EXPECT_NE(log.find("done: 1500 steps"), std::string::npos) << log;
  EXPECT_NE(log.find("all exited cleanly"), std::string::npos) << log;
}

// --scheduler-restarts 0: the scheduler's death stops the job, as before the option existed.
TEST_F(SchedulerRestartTest, WithoutRestartsLeftTheLauncherStopsTheJob) {
  std::string log;
  EXPECT_EQ(LaunchAndKillTheScheduler(Job("ctr", kCtr), 0, dir_.File("launch.log"), &log), 1) << log;
  EXPECT_NE(log.find("scheduler (pid"), std::string::npos) << log;
  EXPECT_NE(log.find("exited with signal 9; stopped the cluster"), std::string::npos) << log;
  EXPECT_EQ(log.find("starting it again"), std::string::npos) << log;
}

// The bound: with --scheduler-restarts 1 the first death is survived, the second stops the job.
TEST_F(SchedulerRestartTest, TheLauncherRestartsItsSchedulerOnlyAsOftenAsAllowed) {
  std::string log;
  EXPECT_EQ(LaunchAndKillTheScheduler(Job("ctr", kCtr), 1, dir_.File("launch.log"), &log, 2), 1) << log;
  EXPECT_NE(log.find("(restart 1 of at most 1)"), std::string::npos) << log;
  EXPECT_NE(log.find("exited with signal 9; it was restarted 1 time(s) already (--scheduler-restarts 1); "
                     "stopped the cluster"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("restart 2 of"), std::string::npos) << log;
}

}  // namespace
}  // namespace strata
