// placement_env_test.cc: the environment convention (strata's, Slurm's and torchrun's
// variables), Slurm host lists, the task-to-role rule, the precedence flags > job file >
// environment, and strata-task choosing its command from the environment.
#include "tools/placement_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_util.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(PlacementEnvTest, ExpandsSlurmHostLists) {
  auto a = ExpandHostList("node[01-03,07]");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_THAT(*a, ElementsAre("node01", "node02", "node03", "node07"));
  auto b = ExpandHostList("a,b");
  ASSERT_TRUE(b.ok());
  EXPECT_THAT(*b, ElementsAre("a", "b"));
  auto c = ExpandHostList("gpu[8-10]-ib,cpu7,x[2]");
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(*c, ElementsAre("gpu8-ib", "gpu9-ib", "gpu10-ib", "cpu7", "x2"));
  auto d = ExpandHostList("localhost");
  ASSERT_TRUE(d.ok());
  EXPECT_THAT(*d, ElementsAre("localhost"));
}

TEST(PlacementEnvTest, BadHostListsNameTheFault) {
  for (const char* bad : {"node[01-03", "node[3-1]", "node[a-b]", "a,,b", "node[]", "n]1"}) {
    auto r = ExpandHostList(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr(bad));
  }
  auto r = ReadPlacement({{"SLURM_NODELIST", "node[5-2]"}});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("SLURM_NODELIST"));
  EXPECT_THAT(r.status().message(), HasSubstr("backwards"));
}

TEST(PlacementEnvTest, SlurmGivesTaskAndSchedulerOnTheFirstNode) {
  auto p = ReadPlacement({{"SLURM_PROCID", "3"},
                          {"SLURM_NTASKS", "6"},
                          {"SLURM_LOCALID", "1"},
                          {"SLURM_NODELIST", "gpu[07-08]"}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->task.value, 3);
  EXPECT_EQ(p->task.var, "SLURM_PROCID");
  EXPECT_EQ(p->tasks.value, 6);
  EXPECT_EQ(p->local_task.value, 1);
  EXPECT_EQ(p->scheduler.value, "tcp://gpu07:7000");
  EXPECT_EQ(p->launcher, "slurm");
  EXPECT_EQ(p->bind_host.value, "*");  // other machines must reach us
  EXPECT_FALSE(p->advertise_host.set());
}

TEST(PlacementEnvTest, TorchrunVariables) {
  auto p = ReadPlacement({{"RANK", "2"},
                          {"WORLD_SIZE", "4"},
                          {"LOCAL_RANK", "0"},
                          {"MASTER_ADDR", "10.0.0.5"},
                          {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->task.value, 2);
  EXPECT_EQ(p->tasks.value, 4);
  EXPECT_EQ(p->scheduler.value, "tcp://10.0.0.5:29500");
  EXPECT_EQ(p->launcher, "torchrun");
}

TEST(PlacementEnvTest, StrataVariablesWinOverSlurmAndTorchrun) {
  auto p = ReadPlacement({{"STRATA_TASK", "1"},
                          {"SLURM_PROCID", "3"},
                          {"RANK", "2"},
                          {"STRATA_NTASKS", "5"},
                          {"SLURM_NTASKS", "9"},
                          {"STRATA_SCHEDULER", "sched.example:7100"},
                          {"MASTER_ADDR", "10.0.0.5"},
                          {"MASTER_PORT", "29500"},
                          {"SLURM_NODELIST", "n[1-2]"},
                          {"STRATA_BIND_HOST", "10.1.2.3"},
                          {"STRATA_ADVERTISE_HOST", "node-a"}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->task.value, 1);
  EXPECT_EQ(p->tasks.value, 5);
  EXPECT_EQ(p->scheduler.value, "tcp://sched.example:7100");
  EXPECT_EQ(p->scheduler.var, "STRATA_SCHEDULER");
  EXPECT_EQ(p->bind_host.value, "10.1.2.3");
  EXPECT_EQ(p->advertise_host.value, "node-a");
  // Slurm's list still gives the node names.
  EXPECT_THAT(p->nodes, ElementsAre("n1", "n2"));
}

TEST(PlacementEnvTest, EmptyEnvironmentSaysNothing) {
  auto p = ReadPlacement({});
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->task.set());
  EXPECT_FALSE(p->scheduler.set());
  EXPECT_FALSE(p->bind_host.set());
  EXPECT_EQ(p->launcher, "");
}

TEST(PlacementEnvTest, BadValuesNameTheVariable) {
  struct Case {
    Environment env;
    std::string var;
  };
  const std::vector<Case> cases = {
      {{{"SLURM_PROCID", "two"}}, "SLURM_PROCID"},
      {{{"SLURM_PROCID", "-1"}}, "SLURM_PROCID"},
      {{{"WORLD_SIZE", "0"}}, "WORLD_SIZE"},
      {{{"STRATA_TASK", "4"}, {"STRATA_NTASKS", "4"}}, "STRATA_TASK"},
      {{{"STRATA_ROLE", "worker"}}, "STRATA_ROLE"},
      {{{"STRATA_SCHEDULER", "nohostport"}}, "STRATA_SCHEDULER"},
      {{{"STRATA_SCHEDULER", "host:99999"}}, "STRATA_SCHEDULER"},
      {{{"MASTER_ADDR", "h"}}, "MASTER_PORT"},
      {{{"MASTER_ADDR", "h"}, {"MASTER_PORT", "x"}}, "MASTER_PORT"},
      {{{"STRATA_SERVERS", "1.5"}}, "STRATA_SERVERS"},
      {{{"STRATA_ADVERTISE_HOST", "0.0.0.0"}}, "STRATA_ADVERTISE_HOST"},
      {{{"STRATA_BIND_HOST", "a b"}}, "STRATA_BIND_HOST"},
      {{{"SLURM_NODELIST", "n1"}, {"STRATA_SCHEDULER_PORT", "0"}}, "STRATA_SCHEDULER_PORT"},
  };
  for (const Case& c : cases) {
    auto p = ReadPlacement(c.env);
    ASSERT_FALSE(p.ok()) << c.var;
    EXPECT_THAT(p.status().message(), HasSubstr(c.var)) << p.status().ToString();
  }
}

TEST(PlacementEnvTest, TaskRoleRule) {
  auto r0 = AssignTaskRole(0, 2, 3);
  ASSERT_TRUE(r0.ok());
  EXPECT_EQ(r0->role, Role::kScheduler);
  std::vector<std::pair<Role, int>> got;
  for (int task = 1; task < 6; ++task) {
    auto r = AssignTaskRole(task, 2, 3);
    ASSERT_TRUE(r.ok());
    got.emplace_back(r->role, r->rank);
  }
  EXPECT_THAT(got, ElementsAre(std::pair(Role::kServer, 0), std::pair(Role::kServer, 1),
                               std::pair(Role::kTrainer, 0), std::pair(Role::kTrainer, 1),
                               std::pair(Role::kTrainer, 2)));
  auto bad = AssignTaskRole(6, 2, 3);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("6 tasks"));
}

// flags > job file > environment, field by field.
TEST(PlacementEnvTest, FlagsOverJobFileOverEnvironment) {
  testing::TempDir dir;
  const std::string job = dir.File("job.yaml");
  testing::WriteFile(job, "cluster:\n  servers: 2\n");
  auto p = ReadPlacement({{"STRATA_SCHEDULER", "envhost:7001"},
                          {"STRATA_SERVERS", "5"},
                          {"STRATA_TRAINERS", "4"}});
  ASSERT_TRUE(p.ok());

  JobFlags flags;
  flags.config_path = job;
  auto j = LoadPlacedJob(flags, *p);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->cluster.scheduler, "tcp://envhost:7001");  // only the environment names it
  EXPECT_EQ(j->cluster.servers, 2);                       // the file beats STRATA_SERVERS
  EXPECT_EQ(j->cluster.trainers, 4);

  flags.overrides = {"cluster.servers=3", "cluster.scheduler=tcp://flaghost:7002"};
  j = LoadPlacedJob(flags, *p);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->cluster.servers, 3);  // the flag beats the file
  EXPECT_EQ(j->cluster.scheduler, "tcp://flaghost:7002");
}

TEST(PlacementEnvTest, TaskCountGivesTheTrainersOrMustAgree) {
  auto p = ReadPlacement({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "5"}, {"SLURM_NODELIST", "n1"}});
  ASSERT_TRUE(p.ok());
  JobFlags flags;
  flags.overrides = {"cluster.servers=1"};
  auto j = LoadPlacedJob(flags, *p);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->cluster.trainers, 3);  // 5 tasks - the scheduler - 1 server
  EXPECT_EQ(j->cluster.scheduler, "tcp://n1:7000");

  flags.overrides = {"cluster.servers=1", "cluster.trainers=2"};
  j = LoadPlacedJob(flags, *p);
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(j.status().message(), HasSubstr("SLURM_NTASKS=5"));
  EXPECT_THAT(j.status().message(), HasSubstr("= 4 tasks"));

  flags.overrides = {"cluster.servers=5"};
  j = LoadPlacedJob(flags, *p);
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(j.status().message(), HasSubstr("SLURM_NTASKS=5"));
}

TEST(PlacementEnvTest, BindEndpoints) {
  JobPlacement none;
  EXPECT_EQ(NodeBindEndpoint("", none, "tcp://127.0.0.1:0"), "tcp://127.0.0.1:0");
  EXPECT_EQ(SchedulerBindEndpoint("", none, "tcp://h:7000"), "tcp://h:7000");
  JobPlacement p;
  p.bind_host = {"*", "STRATA_BIND_HOST"};
  EXPECT_EQ(NodeBindEndpoint("", p, "tcp://127.0.0.1:0"), "tcp://*:0");
  EXPECT_EQ(NodeBindEndpoint("tcp://10.0.0.1:7100", p, "x"), "tcp://10.0.0.1:7100");
  EXPECT_EQ(SchedulerBindEndpoint("", p, "tcp://node1:7010"), "tcp://*:7010");
  EXPECT_EQ(SchedulerBindEndpoint("tcp://a:1", p, "tcp://node1:7010"), "tcp://a:1");
}

TEST(PlacementEnvTest, PlaceNodeTakesFlagsThenEnvironment) {
  JobPlacement p;
  p.rank = {3, "STRATA_RANK"};
  p.advertise_host = {"node-b", "STRATA_ADVERTISE_HOST"};
  NodeOptions o;
  ASSERT_TRUE(PlaceNode(NodeFlags{}, p, Role::kServer, &o).ok());
  EXPECT_EQ(o.requested_rank, 3);
  EXPECT_EQ(o.advertise_host, "node-b");
  ASSERT_TRUE(PlaceNode(NodeFlags{1, "", "node-c"}, p, Role::kServer, &o).ok());
  EXPECT_EQ(o.requested_rank, 1);
  EXPECT_EQ(o.advertise_host, "node-c");
  p.role = {"trainer", "STRATA_ROLE"};
  Status s = PlaceNode(NodeFlags{}, p, Role::kServer, &o);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("STRATA_ROLE"));
}

TEST(PlacementEnvTest, LauncherDropsPlacementVariables) {
  EXPECT_TRUE(IsPlacementVariable("SLURM_PROCID=3"));
  EXPECT_TRUE(IsPlacementVariable("MASTER_ADDR=h"));
  EXPECT_TRUE(IsPlacementVariable("STRATA_SCHEDULER=h:1"));
  EXPECT_FALSE(IsPlacementVariable("SLURM_JOB_ID=3"));
  EXPECT_FALSE(IsPlacementVariable("RANKS=1"));
  EXPECT_FALSE(IsPlacementVariable("STRATA_PROGRESS=launcher"));
}

// strata-task, run as Slurm would run it for each task of a 5-task step.
std::string TaskCommand(const std::vector<std::string>& env, const std::string& log) {
  std::vector<std::string> argv = {"/usr/bin/env", "-i"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.insert(argv.end(), {testing::BinPath("strata-task"), "--dry-run", "--set",
                           "cluster.servers=2"});
  testing::Subprocess task(argv, log);
  const int code = task.Wait(std::chrono::seconds(30));
  return std::to_string(code) + ": " + task.Log();
}

TEST(PlacementEnvTest, StrataTaskPicksItsRoleFromSlurmVariables) {
  testing::TempDir dir;
  const std::vector<std::string> slurm = {"SLURM_NTASKS=5", "SLURM_NODELIST=node[1-2]"};
  auto run = [&](int task) {
    std::vector<std::string> env = slurm;
    env.push_back("SLURM_PROCID=" + std::to_string(task));
    return TaskCommand(env, dir.File("task" + std::to_string(task) + ".log"));
  };
  const std::string t0 = run(0), t2 = run(2), t4 = run(4);
  EXPECT_THAT(t0, ::testing::StartsWith("0: "));
  EXPECT_THAT(t0, HasSubstr("/strata-scheduler --set cluster.servers=2 --set "
                            "cluster.scheduler=tcp://node1:7000"));
  EXPECT_THAT(t2, HasSubstr("/strata-server "));
  EXPECT_THAT(t2, HasSubstr("cluster.trainers=2 --rank 1"));
  EXPECT_THAT(t4, HasSubstr("/strata-trainer "));
  EXPECT_THAT(t4, HasSubstr("--rank 1"));

  const std::string bad = TaskCommand({"SLURM_PROCID=x", "SLURM_NTASKS=5"}, dir.File("bad.log"));
  EXPECT_THAT(bad, ::testing::StartsWith("2: "));
  EXPECT_THAT(bad, HasSubstr("SLURM_PROCID=\"x\""));
  const std::string none = TaskCommand({}, dir.File("none.log"));
  EXPECT_THAT(none, HasSubstr("no task index"));
}

}  // namespace
}  // namespace strata
