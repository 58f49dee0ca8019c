// launch_screen_test.cc: the main job's screen (strata-launch --log): set-up lines, the summary
// table and the figures on the screen, every process's output (servers' statistics included)
// in the log file, and train.plot_path's PNG.
#include <gtest/gtest.h>

#include "tests/integration/launch_fixture.h"
#include "tests/png_check.h"

namespace strata::testing {
namespace {

class LaunchScreenTest : public LaunchFixture {};

TEST_F(LaunchScreenTest, CtrHybridScreenLogAndPlot) {
  const std::string log_path = dir_.File("run.log"), png = dir_.File("ctr.png");
  Subprocess launch({BinPath("strata-launch"), "--servers", "2", "--trainers", "2",
                     std::string(STRATA_SOURCE_DIR) + "/examples/ctr.yaml", "--timeout", "200", "--log", log_path,
                     "--set", "sync.mode=hybrid", "--set", "train.steps=200", "--set", "train.eval_every=100",
                     "--set", "data.eval_samples=2000", "--set", "train.metrics_path=\"\"", "--set",
                     "train.plot_path=" + png, "--set", "server.store.path=" + dir_.File("store")},
                    dir_.File("screen.txt"));
  ASSERT_EQ(launch.Wait(Millis(230000)), 0) << launch.Log();
  const std::string screen = launch.Log(), log = ReadFile(log_path);
  // The screen: set-up lines, the table, the job's figures; no child's info chatter.
  for (const char* want : {"all their output: ", "model has ", "role       rank  exit",
                           "  server        1  ok", "  trainer       0  ok", "job: 200 steps", "(oracle 0.",
                           "hidden behind compute", "plot: " , "all exited cleanly"}) {
    EXPECT_NE(screen.find(want), std::string::npos) << "screen lacks \"" << want << "\":\n" << screen;
  }
  EXPECT_EQ(screen.find("[info]"), std::string::npos) << screen;
  EXPECT_EQ(screen.find("final stats"), std::string::npos) << screen;
  EXPECT_EQ(screen.find("@summary"), std::string::npos) << screen;
  // The log: everything, the servers' final statistics as one readable line each.
  EXPECT_NE(log.find("[server 1] "), std::string::npos) << log;
  EXPECT_NE(log.find("final stats: "), std::string::npos) << log;
  EXPECT_EQ(log.find("final stats: {"), std::string::npos) << log;
  EXPECT_NE(log.find("done: 200 steps"), std::string::npos) << log;
  uint32_t width = 0, height = 0;
  std::string error;
  ASSERT_TRUE(PngSize(png, &width, &height, &error)) << error << "\n" << screen;
  EXPECT_GT(width, 0u);
  EXPECT_GT(height, 0u);
}

TEST_F(LaunchScreenTest, AFailedProcessShowsItsLastLinesAndTheLog) {
  const std::string log_path = dir_.File("run.log");
  // A "trainer" that fails at once with an error message (strata-ckpt refuses the arguments).
  Subprocess launch({BinPath("strata-launch"), "--servers", "1", "--trainers", "1",
                     std::string(STRATA_SOURCE_DIR) + "/examples/smoke.yaml", "--timeout", "60", "--grace-ms", "1000",
                     "--log", log_path, "--server-command", "strata-node --role server", "--trainer-command",
                     "strata-ckpt inspect /nonexistent/ckpt"},
                    dir_.File("screen.txt"));
  EXPECT_EQ(launch.Wait(Millis(90000)), 1) << launch.Log();
  const std::string screen = launch.Log();
  for (const char* want : {"---- the last lines of trainer 0 (all of them in ", "not expected", "trainer       0  code 2",
                           "every process's output is in "}) {
    EXPECT_NE(screen.find(want), std::string::npos) << "screen lacks \"" << want << "\":\n" << screen;
  }
  EXPECT_NE(ReadFile(log_path).find("[trainer 0] strata-ckpt: "), std::string::npos) << ReadFile(log_path);
}

}  // namespace
}  // namespace strata::testing
