// job_config_test.cc: the job file every binary reads (examples/smoke.yaml included) and the
// --config/--set/--print-config flags.
#include "tools/job_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

namespace strata {
namespace {

using ::testing::HasSubstr;

std::string SourcePath(const std::string& relative) {
  return std::string(STRATA_SOURCE_DIR) + "/" + relative;
}

TEST(ConfigJobTest, SmokeExampleLoads) {
  auto job = LoadJobConfig(SourcePath("examples/smoke.yaml"), {});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->cluster.servers, 3);
  EXPECT_EQ(job->cluster.trainers, 4);
  EXPECT_EQ(job->cluster.heartbeat_interval_ms, 200);
  EXPECT_EQ(job->cluster.heartbeat_timeout_ms, 2000);
  EXPECT_EQ(job->log.level, "info");
  EXPECT_FALSE(job->transport.fault.enabled());
}

TEST(ConfigJobTest, NoFileMeansDefaultsPlusOverrides) {
  auto job = LoadJobConfig("", {"cluster.servers=5", "log.level=debug"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->cluster.servers, 5);
  EXPECT_EQ(job->cluster.trainers, ClusterOptions{}.trainers);
  EXPECT_EQ(job->log.level, "debug");
}

TEST(ConfigJobTest, ErrorsNameTheFileOrTheOverride) {
  auto job = LoadJobConfig(SourcePath("examples/smoke.yaml"),
                           {"cluster.trainers=0", "cluster.sevrers=1"});
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().message(),
            "--set cluster.sevrers=1: cluster.sevrers: unknown key (did you mean \"servers\"?)");

  auto bad_level = LoadJobConfig("", {"log.level=loud"});
  EXPECT_THAT(bad_level.status().message(), HasSubstr("--set log.level=loud: log.level: expected"));

  auto missing = LoadJobConfig(SourcePath("examples/no_such_job.yaml"), {});
  EXPECT_TRUE(missing.status().IsNotFound()) << missing.status().ToString();
}

TEST(ConfigJobTest, EveryMalformedOverrideIsReported) {
  auto job = LoadJobConfig("", {"cluster.servers", "=1", "cluster.servers=2"});
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().message(),
            "--set cluster.servers: expected KEY=VALUE, e.g. cluster.servers=4\n"
            "--set =1: empty key in \"\" (expected a dotted path like cluster.servers)");
}

TEST(ConfigJobTest, FlagsLoadFileAndOverridesInOrder) {
  CLI::App app{"test"};
  JobFlags flags;
  AddJobFlags(app, flags);
  app.parse("--config " + SourcePath("examples/smoke.yaml") +
                " --set cluster.trainers=2 --set=cluster.trainers=6 --print-config",
            /*program_name_included=*/false);
  EXPECT_TRUE(flags.print_config);
  EXPECT_EQ(flags.overrides,
            (std::vector<std::string>{"cluster.trainers=2", "cluster.trainers=6"}));
  auto job = ResolveJobConfig(flags);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->cluster.trainers, 6);
  EXPECT_EQ(job->cluster.servers, 3);
}

TEST(ConfigJobTest, MissingConfigFileIsAFlagError) {
  CLI::App app{"test"};
  JobFlags flags;
  AddJobFlags(app, flags);
  EXPECT_THROW(app.parse("--config /no/such/job.yaml", false), CLI::ValidationError);
}

TEST(ConfigJobTest, HelpListsEveryJobField) {
  CLI::App app{"test"};
  JobFlags flags;
  AddJobFlags(app, flags);
  std::string help = app.help();
  for (const char* field : {"--config", "--set", "--print-config", "cluster.servers",
                            "cluster.heartbeat_timeout_ms", "transport.fault.drop_rate",
                            "log.level"}) {
    EXPECT_THAT(help, HasSubstr(field));
  }
}

TEST(ConfigJobTest, PrintedConfigReadsBackTheSame) {
  auto job = LoadJobConfig(SourcePath("examples/smoke.yaml"), {"transport.fault.drop_rate=0.25"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  std::string text = JobConfigToYaml(*job);
  EXPECT_THAT(text, HasSubstr("drop_rate: 0.25\n"));
  auto again = config::Parse<JobConfig>(YAML::Load(text), "printed");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(JobConfigToYaml(*again), text);
}

}  // namespace
}  // namespace strata
