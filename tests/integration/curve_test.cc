// curve_test.cc: cluster.auth: curve with real processes on loopback. A scheduler and a server
// (strata-scheduler, strata-server) and two trainers in this process form a cluster whose every
// socket uses CURVE and train a table; a peer without CURVE and one with an unknown key cannot
// register, push or read the kv store, and the job goes on. A PS job under strata-launch trains
// with CURVE on every role, and cannot form when its members present an unauthorized key.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <future>

#include "common/curve.h"
#include "common/rpc.h"
#include "common/transport.h"
#include "launch_fixture.h"
#include "ps/client.h"
#include "test_util.h"

namespace strata {
namespace {

using testing::BinPath;
using testing::Subprocess;
using testing::TempDir;
using testing::WaitFor;

// Writes the job's keys with strata-node keygen into `dir` (clients named `clients`).
void Keygen(const std::string& dir, const std::string& clients, const std::string& log) {
  Subprocess keygen({BinPath("strata-node"), "keygen", dir, "--clients", clients}, log);
  ASSERT_EQ(keygen.Wait(Millis(20000)), 0) << keygen.Log();
}

std::vector<std::string> CurveSets(const std::string& keys, const std::string& client) {
  return {"cluster.auth=curve", "cluster.curve.server_key=" + keys + "/server.key",
          "cluster.curve.client_key=" + keys + "/" + client + ".key",
          "cluster.curve.authorized_keys=" + keys + "/authorized_keys"};
}

class CurveTest : public ::testing::Test {
 protected:
  TempDir dir_;
};

TEST_F(CurveTest, KeylessAndUnknownPeersAreRefusedWhileTheJobTrains) {
  const std::string keys = dir_.File("keys");
  Keygen(keys, "member", dir_.File("keygen.log"));
  Keygen(dir_.File("other"), "outsider", dir_.File("keygen-other.log"));
  std::vector<std::string> common = {"--set", "cluster.servers=1", "--set", "cluster.trainers=2",
                                     "--set", "cluster.heartbeat_interval_ms=100",
                                     "--set", "cluster.heartbeat_timeout_ms=5000"};
  for (const std::string& s : CurveSets(keys, "member")) {
    common.push_back("--set");
    common.push_back(s);
  }
  std::vector<std::string> sched = {BinPath("strata-scheduler"), "--bind", "tcp://127.0.0.1:0",
                                    "--address-file", dir_.File("addr")};
  sched.insert(sched.end(), common.begin(), common.end());
  Subprocess scheduler(sched, dir_.File("scheduler.log"));
  std::string address;
  ASSERT_TRUE(WaitFor([&] { return static_cast<bool>(std::ifstream(dir_.File("addr")) >> address); },
                      Millis(20000)))
      << scheduler.Log();
  std::vector<std::string> server_argv = {BinPath("strata-server"), "--rank", "0", "--stats-interval-ms", "0",
                                          "--set", "cluster.scheduler=" + address};
  server_argv.insert(server_argv.end(), common.begin(), common.end());
  Subprocess server(server_argv, dir_.File("server.log"));

  auto member = LoadCurveKeys({keys + "/server.key", keys + "/member.key", keys + "/authorized_keys"});
  ASSERT_TRUE(member.ok()) << member.status().ToString();
  CurveKeys outsider = *member;  // knows the job's server key, presents its own client key
  auto outsider_key = ReadCurveKeypair(dir_.File("other/outsider.key"));
  ASSERT_TRUE(outsider_key.ok());
  outsider.client = *outsider_key;
  auto options = [&](const CurveKeys& curve, int rank, int timeout_ms) {
    NodeOptions o;
    o.cluster.scheduler = address;
    o.cluster.servers = 1;
    o.cluster.trainers = 2;
    o.cluster.heartbeat_interval_ms = 100;
    o.cluster.heartbeat_timeout_ms = 5000;
    o.cluster.join_timeout_ms = timeout_ms;
    o.transport.request_timeout_ms = timeout_ms;
    o.transport.curve = curve;
    o.role = Role::kTrainer;
    o.requested_rank = rank;
    return o;
  };

  // Before the trainers: had either intruder registered, it would hold trainer rank 0.
  const std::vector<CurveKeys> intruders = {CurveKeys{}, outsider};  // keyless, unknown key
  for (const CurveKeys& intruder_keys : intruders) {
    Node intruder(options(intruder_keys, 0, 1500));
    Status s = intruder.Join();
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  }

  std::vector<std::unique_ptr<Node>> nodes;
  for (int t = 0; t < 2; ++t) nodes.push_back(std::make_unique<Node>(options(*member, t, 30000)));
  std::vector<std::future<Status>> joins;
  for (auto& n : nodes) joins.push_back(std::async(std::launch::async, [&n] { return n->Join(); }));
  for (auto& j : joins) {
    Status s = j.get();
    ASSERT_TRUE(s.ok()) << s.ToString() << "\n" << scheduler.Log();
  }
  EXPECT_EQ(nodes[0]->rank(), 0);
  ASSERT_TRUE(nodes[0]->KvSet("secret", "42").ok());
  std::vector<std::unique_ptr<PsClient>> clients;
  for (auto& n : nodes) clients.push_back(std::make_unique<PsClient>(*n, Millis(10000)));
  TableSpec table;
  table.id = 1;
  table.name = "emb";
  table.kind = TableKind::kSparse;
  table.dim = 4;
  table.optimizer.lr = 1.0f;  // SGD from zeros: value = -(sum of gradients)
  for (auto& c : clients) ASSERT_TRUE(c->CreateTable(table).ok());
  const std::vector<uint64_t> keys_pushed = {1, 2, 3};
  const std::vector<float> ones(3 * 4, 1.0f);
  auto step = [&] {
    for (auto& c : clients) {
      PsTicket p = c->Push(1, keys_pushed, ones.data());
      Status s = c->Wait(p);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  };
  step();

  // Raw requests without CURVE and with the unknown key: a push to the server and a kv read
  // from the scheduler. Neither is read by its target: they time out.
  const ClusterView view = nodes[0]->view();
  const std::string server_address = view.Find(Role::kServer, 0)->address;
  for (const CurveKeys& intruder_keys : intruders) {
    TransportOptions o;
    o.curve = intruder_keys;
    auto t = MakeTransport("tcp://127.0.0.1:0", o);
    ASSERT_TRUE(t.ok());
    RpcEndpoint raw(std::move(t).value());
    Message push;
    auto b = push.builder().getBody().initPush();
    b.setTable(1);
    push.AddPayload(DType::kI64, {1}, Buffer::Take(std::vector<uint64_t>{1}));
    push.AddPayload(DType::kF32, {1, 4}, Buffer::Take(std::vector<float>(4, 100.0f)));
    auto to_server = raw.Connect(server_address);
    ASSERT_TRUE(to_server.ok());
    EXPECT_EQ(raw.CallAndWait(*to_server, std::move(push), Millis(1500)).status().code(),
              StatusCode::kDeadlineExceeded);
    Message get;
    get.builder().getBody().initKvGet().setKey("secret");
    auto to_scheduler = raw.Connect(address);
    ASSERT_TRUE(to_scheduler.ok());
    EXPECT_EQ(raw.CallAndWait(*to_scheduler, std::move(get), Millis(1500)).status().code(),
              StatusCode::kDeadlineExceeded);
  }

  // The job went on: more steps, and exactly the members' pushes are applied.
  step();
  step();
  std::vector<float> values(3 * 4);
  PsTicket pull = clients[0]->Pull(1, keys_pushed, values.data());
  ASSERT_TRUE(clients[0]->Wait(pull).ok());
  for (float v : values) EXPECT_EQ(v, -6.0f);  // 3 steps x 2 trainers
  auto secret = nodes[1]->KvGet("secret");
  ASSERT_TRUE(secret.ok());
  EXPECT_EQ(*secret, "42");

  clients.clear();
  for (auto& n : nodes) EXPECT_TRUE(n->Leave().ok());
  scheduler.Signal(SIGTERM);
  EXPECT_EQ(scheduler.Wait(Millis(20000)), 0) << scheduler.Log();
  EXPECT_EQ(server.Wait(Millis(20000)), 0) << server.Log();
  EXPECT_NE(scheduler.Log().find("refused a connection"), std::string::npos) << scheduler.Log();
  EXPECT_NE(server.Log().find("refused a connection"), std::string::npos) << server.Log();
}

class CurveLaunchTest : public testing::LaunchFixture {};

// Every role of a parameter-server job (scheduler, 2 servers, 2 trainers and their kv store use)
// under strata-launch with CURVE.
TEST_F(CurveLaunchTest, APsJobTrainsWithCurveOnEverySocket) {
  const std::string keys = dir_.File("keys");
  Keygen(keys, "member", dir_.File("keygen.log"));
  const std::string job = Job("mlp",
                              "model: {kind: mlp, mlp_in: 16, mlp_hidden: 32, mlp_out: 4}\n"
                              "data: {kind: regression, eval_samples: 64}\n"
                              "optimizer: {kind: sgd, lr: 0.05}\n"
                              "train: {steps: 5, batch_size: 16, log_every: 1, progress: false}\n");
  std::vector<std::string> sets = CurveSets(keys, "member");
  sets.push_back("sync.mode=ps");
  sets.push_back("train.metrics_path=" + Metrics("curve"));
  std::string log;
  ASSERT_EQ(Launch(job, 2, 2, sets, &log), 0) << log;
  EXPECT_EQ(testing::Losses(Rank("curve", 0)).size(), 5u) << log;
  EXPECT_EQ(testing::Losses(Rank("curve", 1)).size(), 5u) << log;

  // The same job whose processes all present a key outside authorized_keys cannot form: every
  // role's sockets really are CURVE (the scheduler refuses the registrations).
  Keygen(dir_.File("other"), "outsider", dir_.File("keygen-other.log"));
  sets[2] = "cluster.curve.client_key=" + dir_.File("other/outsider.key");
  sets.push_back("cluster.join_timeout_ms=3000");
  EXPECT_NE(Launch(job, 2, 2, sets, &log), 0) << log;
  EXPECT_NE(log.find("refused a connection"), std::string::npos) << log;
}

}  // namespace
}  // namespace strata
