// plot_test.cc: WritePlot draws a valid PNG with gnuplot (scripts/setup.sh installs
// gnuplot-nox), says NotFound when gnuplot cannot be run, and refuses an empty run.
#include "trainer/plot.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/png_check.h"
#include "tests/test_util.h"

namespace strata {
namespace {

TrainingCurves SomeCurves(bool auc) {
  TrainingCurves c;
  c.title = "ctr, hybrid, 2 trainer(s) 'quoted'";
  c.first_step = 10;
  for (int i = 0; i < 200; ++i) c.losses.push_back(0.7 * std::exp(-i / 60.0) + 0.45 + 0.01 * std::sin(i));
  for (int s : {60, 120, 210}) c.evals.push_back({s, 0.6 - s / 1000.0, auc ? 0.7 + s / 2000.0 : -1});
  if (auc) c.oracle_auc = 0.84;
  return c;
}

TEST(PlotTest, WritesAValidPng) {
  testing::TempDir dir;
  for (bool auc : {true, false}) {
    const std::string path = dir.File(auc ? "auc.png" : "loss.png");
    const Status s = WritePlot(SomeCurves(auc), path);
    ASSERT_TRUE(s.ok()) << s.ToString() << " (scripts/setup.sh installs gnuplot-nox)";
    uint32_t width = 0, height = 0;
    std::string error;
    ASSERT_TRUE(testing::PngSize(path, &width, &height, &error)) << error;
    EXPECT_EQ(width, 960u);
    EXPECT_EQ(height, 540u);
  }
}

TEST(PlotTest, ScriptDrawsAucOnlyWhereThereIsOne) {
  const std::string with = PlotScript(SomeCurves(true), "/x.png");
  EXPECT_NE(with.find("'AUC'"), std::string::npos) << with;
  EXPECT_NE(with.find("oracle = 0.84"), std::string::npos) << with;
  EXPECT_NE(with.find("'ctr, hybrid, 2 trainer(s) ''quoted'''"), std::string::npos) << with;
  const std::string without = PlotScript(SomeCurves(false), "/x.png");
  EXPECT_EQ(without.find("AUC"), std::string::npos) << without;
  // The first loss is step first_step + 1.
  EXPECT_NE(without.find("$loss << EOD\n11 "), std::string::npos) << without;
}

TEST(PlotTest, MissingGnuplotIsNotFoundNamingIt) {
  testing::TempDir dir;
  const Status s = WritePlot(SomeCurves(true), dir.File("x.png"), "/nonexistent/gnuplot");
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_NE(s.ToString().find("gnuplot-nox"), std::string::npos) << s.ToString();
}

TEST(PlotTest, NoStepsIsInvalidArgument) {
  testing::TempDir dir;
  EXPECT_EQ(WritePlot(TrainingCurves{}, dir.File("x.png")).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata
