// job_config_test.cc: the job file every binary reads (examples/smoke.yaml included) and the
// --config/--set/--print-config flags.
#include "tools/job_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include "common/curve.h"
#include "test_util.h"
#include "trainer/parallel/plan.h"

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

TEST(ConfigJobTest, ServerStoreDefaultsToMemoryAndTieredExampleLoads) {
  auto defaults = LoadJobConfig("", {});
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->server.store.kind, StoreKind::kMemory);
  EXPECT_EQ(defaults->server.workers, 2);

  auto job = LoadJobConfig(SourcePath("examples/tiered_server.yaml"), {});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->server.workers, 4);
  EXPECT_EQ(job->server.store.kind, StoreKind::kTiered);
  EXPECT_EQ(job->server.store.path, "/tmp/strata-store");
  EXPECT_EQ(job->server.store.dram_budget_mb, 1024u);
  EXPECT_EQ(job->server.store.policy, EvictionPolicy::kLfu);
  EXPECT_EQ(job->server.store.durability, Durability::kWal);

  auto checkpoint = LoadJobConfig(SourcePath("examples/tiered_server.yaml"),
                                  {"server.store.durability=checkpoint",
                                   "server.store.checkpoint_every_clocks=50"});
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  EXPECT_EQ(checkpoint->server.store.durability, Durability::kCheckpoint);
  EXPECT_EQ(checkpoint->server.store.checkpoint_every_clocks, 50u);
}

TEST(ConfigJobTest, ServerStoreErrorsNameTheField) {
  auto no_path = LoadJobConfig("", {"server.store.kind=tiered"});
  EXPECT_THAT(no_path.status().message(),
              HasSubstr("server.store.path: is required by kind: tiered"));
  auto memory_wal = LoadJobConfig("", {"server.store.durability=wal"});
  EXPECT_THAT(memory_wal.status().message(),
              HasSubstr("server.store.durability: needs kind: tiered"));
  auto never = LoadJobConfig("", {"server.store.kind=tiered", "server.store.path=/tmp/x",
                                  "server.store.durability=checkpoint"});
  EXPECT_THAT(never.status().message(),
              HasSubstr("server.store.checkpoint_every_clocks: must be at least 1"));
  auto policy = LoadJobConfig("", {"server.store.policy=fifo"});
  EXPECT_THAT(policy.status().message(), HasSubstr("server.store.policy: expected"));
  auto workers = LoadJobConfig("", {"server.workers=0"});
  EXPECT_THAT(workers.status().message(), HasSubstr("server.workers: expected"));
}

TEST(ConfigJobTest, ServerReplicationIsCheckedAgainstTheServersAndConsistency) {
  auto defaults = LoadJobConfig("", {});
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->server.replication, Replication::kNone);
  auto ok = LoadJobConfig("", {"server.replication=backup", "cluster.servers=2", "sync.consistency=asp"});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->server.replication, Replication::kBackup);
  auto bad = LoadJobConfig("", {"server.replication=mirror"});
  EXPECT_THAT(bad.status().message(), HasSubstr("server.replication: expected"));
  auto one = LoadJobConfig("", {"server.replication=backup", "cluster.servers=1", "sync.consistency=asp"});
  EXPECT_THAT(one.status().message(), HasSubstr("server.replication: backup needs cluster.servers of 2 or more"));
  EXPECT_THAT(one.status().message(), HasSubstr("got 1"));
  // The tiered store replicates too (the copy keeps stores of its own).
  auto tiered = LoadJobConfig("", {"server.replication=backup", "cluster.servers=2", "server.store.kind=tiered",
                                   "server.store.path=/tmp/x", "sync.consistency=asp",
                                   "server.store.durability=wal"});
  ASSERT_TRUE(tiered.ok()) << tiered.status().ToString();
  EXPECT_EQ(tiered->server.store.kind, StoreKind::kTiered);
  // BSP replicates, the tables that apply a dense chunk once every replica pushed it included
  // (global clipping, offload).
  EXPECT_TRUE(LoadJobConfig("", {"server.replication=backup", "cluster.servers=2", "sync.mode=ps",
                                 "sync.consistency=bsp"}).ok());
  EXPECT_TRUE(LoadJobConfig("", {"server.replication=backup", "cluster.servers=2", "sync.mode=ps",
                                 "sync.consistency=bsp", "optimizer.clip_norm=1"}).ok());
  EXPECT_TRUE(LoadJobConfig("", {"server.replication=backup", "cluster.servers=2", "sync.mode=offload",
                                 "sync.consistency=bsp"}).ok());
  // Trainers and servers come and go in a replicated job.
  for (const char* consistency : {"sync.consistency=asp", "sync.consistency=bsp"}) {
    EXPECT_TRUE(LoadJobConfig("", {"server.replication=backup", "cluster.servers=2", "sync.mode=ps", consistency,
                                   "cluster.elastic=true"}).ok())
        << consistency;
  }
  // allreduce jobs have no tables on servers: their consistency does not matter.
  EXPECT_TRUE(LoadJobConfig("", {"server.replication=backup", "cluster.servers=2", "sync.mode=allreduce",
                                 "sync.consistency=bsp"}).ok());
}

// What a peer can make a process hold (docs/security.md): defaults, overrides, and bad values
// naming the field.
TEST(ConfigJobTest, PeerBoundsHaveDefaultsAndErrorsNameTheField) {
  auto defaults = LoadJobConfig("", {});
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->transport.max_message_mb, 256);
  EXPECT_EQ(defaults->server.max_parked_per_peer, 65536);
  EXPECT_EQ(defaults->server.max_parked_mb_per_peer, 256);
  auto set = LoadJobConfig("", {"transport.max_message_mb=1", "server.max_parked_per_peer=4",
                                "server.max_parked_mb_per_peer=8"});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->transport.max_message_mb, 1);
  EXPECT_EQ(set->server.max_parked_per_peer, 4);
  EXPECT_EQ(set->server.max_parked_mb_per_peer, 8);
  for (const char* bad : {"transport.max_message_mb=0", "transport.max_message_mb=x", "server.max_parked_per_peer=0",
                          "server.max_parked_per_peer=-3", "server.max_parked_mb_per_peer=0"}) {
    auto r = LoadJobConfig("", {bad});
    const std::string field = std::string(bad).substr(0, std::string(bad).find('='));
    EXPECT_THAT(r.status().message(), HasSubstr(field + ": expected")) << bad;
  }
}

TEST(ConfigJobTest, MigrateChunkMbIsPositiveAndFitsTheLargestMessage) {
  auto defaults = LoadJobConfig("", {});
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->server.migrate_chunk_mb, 16.0);
  auto small = LoadJobConfig("", {"server.migrate_chunk_mb=0.01"});
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  EXPECT_EQ(small->server.migrate_chunk_mb, 0.01);
  // The default follows a smaller transport.max_message_mb down.
  auto followed = LoadJobConfig("", {"transport.max_message_mb=4"});
  ASSERT_TRUE(followed.ok()) << followed.status().ToString();
  EXPECT_EQ(followed->server.migrate_chunk_mb, 4.0);
  auto over = LoadJobConfig("", {"transport.max_message_mb=4", "server.migrate_chunk_mb=8"});
  EXPECT_THAT(over.status().message(),
              HasSubstr("server.migrate_chunk_mb: 8 MiB exceeds transport.max_message_mb (4 MiB)"));
  for (const char* bad : {"server.migrate_chunk_mb=0", "server.migrate_chunk_mb=-1", "server.migrate_chunk_mb=0.0001",
                          "server.migrate_chunk_mb=x"}) {
    auto r = LoadJobConfig("", {bad});
    EXPECT_THAT(r.status().message(), HasSubstr("server.migrate_chunk_mb: expected")) << bad;
  }
}

// Every example is one job file for every binary: the trainer's sections sit beside the
// cluster's, and they are checked like any other.
TEST(ConfigJobTest, TrainingExamplesLoadAndTrainerFieldsAreChecked) {
  for (const char* name : {"mlp", "ctr", "gpt"}) {
    auto job = LoadJobConfig(SourcePath(std::string("examples/") + name + ".yaml"), {});
    EXPECT_TRUE(job.ok()) << name << ": " << job.status().ToString();
  }
  auto ctr = LoadJobConfig(SourcePath("examples/ctr.yaml"), {});
  ASSERT_TRUE(ctr.ok());
  EXPECT_EQ(ctr->trainer.sync.mode, SyncOptions::Mode::kPs);
  EXPECT_EQ(ctr->trainer.sync.consistency, Consistency::kAsp);
  EXPECT_EQ(ctr->server.store.kind, StoreKind::kTiered);
  auto typo = LoadJobConfig("", {"train.stpes=3"});
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("steps"), std::string::npos) << typo.status().ToString();
  EXPECT_FALSE(LoadJobConfig("", {"model.kind=gpt", "model.width=30", "model.heads=4"}).ok());
  auto mode = LoadJobConfig("", {"sync.mode=allreduc"});
  ASSERT_FALSE(mode.ok());
  EXPECT_NE(mode.status().message().find("sync.mode"), std::string::npos) << mode.status().ToString();
  auto staleness = LoadJobConfig("", {"sync.staleness=3"});  // without consistency: ssp
  ASSERT_FALSE(staleness.ok());
  EXPECT_NE(staleness.status().message().find("staleness"), std::string::npos);
}

TEST(ConfigJobTest, MatmulPrecisionIsFp32UnlessAsked) {
  auto plain = LoadJobConfig("", {});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->trainer.train.matmul_precision, ops::MatmulPrecision::kFp32);
  EXPECT_EQ(plain->trainer.train.Matmul(), ops::MatmulPrecision::kFp32);
  EXPECT_EQ(plain->trainer.train.Saved(), DType::kF32);
  auto bf16 = LoadJobConfig("", {"train.device=cuda", "train.matmul_precision=bf16"});
  ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
  EXPECT_EQ(bf16->trainer.train.matmul_precision, ops::MatmulPrecision::kBf16);
  EXPECT_EQ(bf16->trainer.train.Saved(), DType::kF32);  // the matmuls only
  auto cpu = LoadJobConfig("", {"train.matmul_precision=tf32"});  // the CPU rounds the inputs
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ(cpu->trainer.train.Matmul(), ops::MatmulPrecision::kTf32);
  auto typo = LoadJobConfig("", {"train.device=cuda", "train.matmul_precision=fp16"});
  ASSERT_FALSE(typo.ok());
  EXPECT_THAT(typo.status().message(), HasSubstr("matmul_precision"));
}

TEST(ConfigJobTest, PrecisionBf16MultipliesAndSavesInBf16) {
  auto bf16 = LoadJobConfig("", {"train.precision=bf16"});
  ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
  EXPECT_EQ(bf16->trainer.train.Matmul(), ops::MatmulPrecision::kBf16);
  EXPECT_EQ(bf16->trainer.train.Saved(), DType::kBF16);
  auto tf32 = LoadJobConfig("", {"train.precision=bf16", "train.matmul_precision=tf32"});
  ASSERT_FALSE(tf32.ok());
  EXPECT_THAT(tf32.status().message(), HasSubstr("train.precision"));
  EXPECT_THAT(tf32.status().message(), HasSubstr("tf32"));
  auto fp16 = LoadJobConfig("", {"train.precision=fp16"});
  ASSERT_FALSE(fp16.ok());
  EXPECT_THAT(fp16.status().message(), HasSubstr("precision"));
}

// The tensor-parallel examples plan on the trainers their headers name, with the rank layout
// their tables draw (tp fastest, then dp, then pp).
TEST(ConfigJobTest, TensorParallelExamplesPlanOnTheirTrainersInMegatronOrder) {
  auto gpt = LoadJobConfig(SourcePath("examples/gpt_3d.yaml"), {});
  ASSERT_TRUE(gpt.ok()) << gpt.status().ToString();
  auto plan = ResolvePlan(gpt->trainer, 8);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->dp, 2);
  EXPECT_EQ(plan->tp, 2);
  EXPECT_EQ(plan->pp, 2);
  EXPECT_EQ(plan->mesh.GroupOf(5, "tp"), (std::vector<int>{4, 5}));
  EXPECT_EQ(plan->mesh.GroupOf(5, "dp"), (std::vector<int>{5, 7}));
  EXPECT_EQ(plan->mesh.GroupOf(5, "pp"), (std::vector<int>{1, 5}));
  EXPECT_FALSE(ResolvePlan(gpt->trainer, 4).ok());

  auto mlp = LoadJobConfig(SourcePath("examples/mlp_tp.yaml"), {});
  ASSERT_TRUE(mlp.ok()) << mlp.status().ToString();
  plan = ResolvePlan(mlp->trainer, 4);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->dp, 2);
  EXPECT_EQ(plan->tp, 2);
  EXPECT_EQ(plan->pp, 1);
  EXPECT_EQ(plan->mesh.GroupOf(2, "tp"), (std::vector<int>{2, 3}));
  EXPECT_EQ(plan->mesh.GroupOf(2, "dp"), (std::vector<int>{0, 2}));
}

// cluster.auth: curve needs its three key files, and reads them at load: a bad one stops the
// binary naming the job field and the file.
TEST(ConfigJobTest, CurveAuthNeedsReadableKeyFiles) {
  auto missing = LoadJobConfig("", {"cluster.auth=curve"});
  ASSERT_FALSE(missing.ok());
  for (const char* field : {"curve.server_key", "curve.client_key", "curve.authorized_keys"}) {
    EXPECT_NE(missing.status().message().find(field), std::string::npos) << missing.status().ToString();
  }
  testing::TempDir dir;
  ASSERT_TRUE(GenerateCurveKeys(dir.path(), {"a"}).ok());
  const std::vector<std::string> sets = {"cluster.auth=curve", "cluster.curve.server_key=" + dir.File("server.key"),
                                         "cluster.curve.client_key=" + dir.File("a.key"),
                                         "cluster.curve.authorized_keys=" + dir.File("authorized_keys")};
  auto good = LoadJobConfig("", sets);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_TRUE(good->transport.curve.enabled());
  EXPECT_EQ(good->transport.curve.authorized.size(), 1u);
  // The secrets are never printed with the job.
  EXPECT_EQ(JobConfigToYaml(*good).find(good->transport.curve.server.secret_key), std::string::npos);

  std::vector<std::string> bad = sets;
  bad[2] = "cluster.curve.client_key=" + dir.File("nope.key");
  auto unreadable = LoadJobConfig("", bad);
  ASSERT_FALSE(unreadable.ok());
  EXPECT_NE(unreadable.status().message().find("cluster.curve.client_key"), std::string::npos)
      << unreadable.status().ToString();
  EXPECT_NE(unreadable.status().message().find("nope.key"), std::string::npos) << unreadable.status().ToString();
}

}  // namespace
}  // namespace strata
