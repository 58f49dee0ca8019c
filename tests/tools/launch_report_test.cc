// launch_report_test.cc: strata-launch's end-of-job table and trainer 0's @summary figures.
#include "tools/launch_report.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(LaunchReportTest, SummaryRoundTrips) {
  JobReport r;
  r.steps = 2000;
  r.seconds = 31.5;
  r.samples_per_second = 63257;
  r.loss = 0.49322;
  r.eval_loss = 0.50222;
  r.auc = 0.8095;
  r.oracle_auc = 0.8396;
  r.comm_name = "all-reduce";
  r.comm_seconds = 5.68;
  r.comm_hidden_percent = 99.5;
  r.plot_path = "/tmp/a.png";
  auto back = ParseJobReport(JobReportJson(r));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->steps, 2000);
  EXPECT_DOUBLE_EQ(back->auc, 0.8095);
  EXPECT_DOUBLE_EQ(back->oracle_auc, 0.8396);
  EXPECT_EQ(back->comm_name, "all-reduce");
  EXPECT_EQ(back->plot_path, "/tmp/a.png");
  EXPECT_FALSE(ParseJobReport("not json").has_value());
  EXPECT_FALSE(ParseJobReport("{\"rank\": 0}").has_value());
}

TEST(LaunchReportTest, TableHasEveryProcessAndTheJob) {
  std::vector<ProcessReport> rows = {{"scheduler", 0, 33.4, 20480}, {"server 1", 0, 33.0, 307200},
                                     {"trainer 0", 137, 12.0, 102400}, {"trainer 1", -1, 0, 0}};
  JobReport job;
  job.steps = 2000;
  job.samples_per_second = 63257;
  job.auc = 0.8095;
  job.oracle_auc = 0.8396;
  const auto lines = FormatReport(rows, job);
  ASSERT_EQ(lines.size(), 1 + rows.size() + 1);
  EXPECT_NE(lines[0].find("peak RSS"), std::string::npos);
  EXPECT_NE(lines[1].find("scheduler"), std::string::npos);
  EXPECT_NE(lines[1].find("20 MiB"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("server"), std::string::npos);
  EXPECT_NE(lines[2].find(" 1 "), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find("signal 9"), std::string::npos) << lines[3];
  EXPECT_NE(lines[4].find(" - "), std::string::npos) << lines[4];
  EXPECT_NE(lines[5].find("AUC 0.8095 (oracle 0.8396)"), std::string::npos) << lines[5];
  // Without a summary (a failed job, or no trainer 0): only the processes.
  EXPECT_EQ(FormatReport(rows, std::nullopt).size(), 1 + rows.size());
}

TEST(LaunchReportTest, ExitTexts) {
  EXPECT_EQ(ExitText(0), "ok");
  EXPECT_EQ(ExitText(1), "code 1");
  EXPECT_EQ(ExitText(143), "signal 15");
  EXPECT_EQ(ExitText(-1), "-");
}

}  // namespace
}  // namespace strata
