// cluster_test.cc: real processes on loopback: a scheduler, 3 servers and 4 trainers join, pass
// barriers and use the kv store; a node killed with SIGKILL is reported dead to the others
// within the heartbeat timeout; duplicate and malformed registrations get clear errors and the
// scheduler keeps serving; the launcher stops everything when a process fails.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <future>

#include "common/rpc.h"
#include "common/transport.h"
#include "test_util.h"

namespace strata {
namespace {

using testing::BinPath;
using testing::Subprocess;
using testing::TempDir;
using testing::WaitFor;

constexpr int kHeartbeatTimeoutMs = 2500;  // generous: a loaded CI machine must not fake deaths

class ClusterTest : public ::testing::Test {
 protected:
  std::vector<std::string> Common(int servers, int trainers) {
    return {"--set", "cluster.servers=" + std::to_string(servers),
            "--set", "cluster.trainers=" + std::to_string(trainers),
            "--set", "cluster.heartbeat_interval_ms=50",
            "--set", "cluster.heartbeat_timeout_ms=" + std::to_string(kHeartbeatTimeoutMs),
            "--set", "cluster.join_timeout_ms=30000"};
  }

  // Starts the scheduler on a free port; returns its address.
  std::string StartScheduler(int servers, int trainers) {
    std::vector<std::string> argv = {BinPath("strata-scheduler"), "--bind", "tcp://127.0.0.1:0",
                                     "--address-file", dir_.File("scheduler.address")};
    for (auto& a : Common(servers, trainers)) argv.push_back(a);
    scheduler_ = std::make_unique<Subprocess>(argv, dir_.File("scheduler.log"));
    std::string address;
    EXPECT_TRUE(WaitFor([&] {
      std::ifstream in(dir_.File("scheduler.address"));
      return static_cast<bool>(in >> address);
    }, Millis(20000))) << scheduler_->Log();
    return address;
  }

  Subprocess& StartNode(const std::string& address, int servers, int trainers,
                        const std::string& role, int rank, bool stay) {
    std::vector<std::string> argv = {BinPath("strata-node"), "--role", role, "--rank",
                                     std::to_string(rank), "--set", "cluster.scheduler=" + address};
    for (auto& a : Common(servers, trainers)) argv.push_back(a);
    if (stay) argv.push_back("--stay");
    const std::string log = dir_.File(role + std::to_string(rank) + ".log");
    nodes_.push_back(std::make_unique<Subprocess>(argv, log));
    return *nodes_.back();
  }

  TempDir dir_;
  std::unique_ptr<Subprocess> scheduler_;
  std::vector<std::unique_ptr<Subprocess>> nodes_;
};

TEST_F(ClusterTest, SevenNodesJoinMeetAndLeave) {
  const std::string address = StartScheduler(3, 4);
  for (int r = 0; r < 3; ++r) StartNode(address, 3, 4, "server", r, false);
  for (int r = 0; r < 4; ++r) StartNode(address, 3, 4, "trainer", r, false);
  for (auto& n : nodes_) {
    EXPECT_EQ(n->Wait(Millis(60000)), 0) << n->Log() << "\nscheduler:\n" << scheduler_->Log();
    EXPECT_NE(n->Log().find("smoke ok: 7 nodes"), std::string::npos) << n->Log();
  }
  // Every node left cleanly, so the scheduler ends the job by itself.
  EXPECT_EQ(scheduler_->Wait(Millis(20000)), 0) << scheduler_->Log();
  EXPECT_NE(scheduler_->Log().find("cluster complete: 3 servers, 4 trainers"), std::string::npos);
}

TEST_F(ClusterTest, KilledNodeIsReportedDeadToTheOthers) {
  const std::string address = StartScheduler(1, 2);
  Subprocess& server = StartNode(address, 1, 2, "server", 0, true);
  Subprocess& t0 = StartNode(address, 1, 2, "trainer", 0, true);
  Subprocess& t1 = StartNode(address, 1, 2, "trainer", 1, true);
  for (Subprocess* n : {&server, &t0, &t1}) {
    ASSERT_TRUE(WaitFor([&] { return n->Log().find("smoke ok") != std::string::npos; }, Millis(60000)))
        << n->Log();
  }
  t1.Signal(SIGKILL);
  ASSERT_EQ(t1.Wait(Millis(10000)), 128 + SIGKILL);
  // Declared dead once silent past the timeout; the bound below adds slack for a loaded machine.
  for (Subprocess* n : {&server, &t0}) {
    EXPECT_TRUE(WaitFor([&] { return n->Log().find("event: dead trainer 1") != std::string::npos; },
                        Millis(kHeartbeatTimeoutMs + 10000)))
        << n->Log();
  }
  EXPECT_NE(scheduler_->Log().find("trainer 1 (node 3"), std::string::npos) << scheduler_->Log();
  // Ending the job: the scheduler tells the survivors, who leave cleanly.
  scheduler_->Signal(SIGTERM);
  EXPECT_EQ(scheduler_->Wait(Millis(20000)), 0) << scheduler_->Log();
  EXPECT_EQ(server.Wait(Millis(20000)), 0) << server.Log();
  EXPECT_EQ(t0.Wait(Millis(20000)), 0) << t0.Log();
}

Message Register(wire::Role role, const std::string& address, int rank, uint32_t pid) {
  Message m;
  auto r = m.builder().getBody().initRegister();
  r.setRole(role);
  r.setAddress(address);
  r.setRequestedRank(rank);
  r.setHostname("intruder");
  r.setPid(pid);
  return m;
}

TEST_F(ClusterTest, BadRegistrationsGetErrorsAndTheSchedulerKeepsServing) {
  const std::string address = StartScheduler(1, 1);
  auto transport = MakeTransport("tcp://127.0.0.1:0", {});
  ASSERT_TRUE(transport.ok());
  RpcEndpoint raw(std::move(transport).value(), RpcOptions{Millis(10000), {}});
  auto peer = raw.Connect(address);
  ASSERT_TRUE(peer.ok());

  // Garbage bytes, then an envelope that lies about its payloads.
  auto junk = MakeTransport("tcp://127.0.0.1:0", {});
  auto jp = (*junk)->Connect(address);
  ASSERT_TRUE((*junk)->Send(*jp, {Buffer::Copy("\x00\x01garbage garbage garbage")}).ok());
  {
    // A registration whose header describes a payload that no frame follows: the scheduler
    // answers the request id it could read with the reason.
    std::promise<Frames> answered;
    (*junk)->SetReceiver([&](Source, Frames frames) { answered.set_value(std::move(frames)); });
    Message lie = Register(wire::Role::SERVER, "tcp://127.0.0.1:1", -1, 1);
    lie.set_request_id(77);
    lie.AddBytes(Buffer::Copy("payload"));
    Frames frames = Encode(std::move(lie));
    frames.pop_back();
    ASSERT_TRUE((*junk)->Send(*jp, std::move(frames)).ok());
    auto reply = answered.get_future();
    ASSERT_EQ(reply.wait_for(std::chrono::seconds(30)), std::future_status::ready);
    auto r = Decode(reply.get());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->request_id(), 77u);
    EXPECT_EQ(r->status().code(), StatusCode::kInvalidArgument) << r->status().ToString();
    EXPECT_NE(r->status().message().find("describes 1 payloads but 0 frames"), std::string::npos)
        << r->status().ToString();
  }
  auto status_of = [&](Message m) { return raw.CallAndWait(*peer, std::move(m)).status(); };
  Status s = status_of(Register(wire::Role::CLIENT, "tcp://127.0.0.1:1", -1, 1));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("role client"), std::string::npos) << s.ToString();
  s = status_of(Register(wire::Role::TRAINER, "not-an-endpoint", -1, 1));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not-an-endpoint"), std::string::npos) << s.ToString();

  // The real server registers with rank 0; an impostor claims the same rank.
  Subprocess& server = StartNode(address, 1, 1, "server", 0, false);
  ASSERT_TRUE(WaitFor([&] { return scheduler_->Log().find("server at") != std::string::npos; },
                      Millis(30000)));
  s = status_of(Register(wire::Role::SERVER, "tcp://127.0.0.1:2", 0, 77));
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find("server rank 0 was already requested"), std::string::npos) << s.ToString();

  Subprocess& trainer = StartNode(address, 1, 1, "trainer", 0, false);
  EXPECT_EQ(server.Wait(Millis(60000)), 0) << server.Log();
  EXPECT_EQ(trainer.Wait(Millis(60000)), 0) << trainer.Log();
  EXPECT_EQ(scheduler_->Wait(Millis(20000)), 0) << scheduler_->Log();
  EXPECT_NE(scheduler_->Log().find("rejected a message"), std::string::npos) << scheduler_->Log();
}

TEST_F(ClusterTest, LauncherRunsTheSmokeCluster) {
  Subprocess launch({BinPath("strata-launch"), "--servers", "3", "--trainers", "4",
                     std::string(STRATA_SOURCE_DIR) + "/examples/smoke.yaml", "--timeout", "120",
                     "--server-command", "strata-node --role server", "--trainer-command",
                     "strata-node --role trainer"},
                    dir_.File("launch.log"));
  EXPECT_EQ(launch.Wait(Millis(150000)), 0) << launch.Log();
  const std::string log = launch.Log();
  EXPECT_NE(log.find("all exited cleanly"), std::string::npos) << log;
  EXPECT_NE(log.find("[trainer 3] "), std::string::npos) << log;
}

TEST_F(ClusterTest, LauncherStopsEverythingWhenOneProcessFails) {
  // Trainers run a program that fails at once; the servers would wait for them forever.
  Subprocess launch({BinPath("strata-launch"), "--servers", "2", "--trainers", "2",
                     std::string(STRATA_SOURCE_DIR) + "/examples/smoke.yaml", "--grace-ms", "2000",
                     "--trainer-command", "/bin/false"},
                    dir_.File("launch.log"));
  EXPECT_EQ(launch.Wait(Millis(60000)), 1) << launch.Log();
  const std::string log = launch.Log();
  EXPECT_NE(log.find("exited with code 1; stopped the cluster"), std::string::npos) << log;
  // Every process it started is gone (stopped and reaped before it exited).
  int started = 0;
  const std::string mark = "strata-launch: started ";
  for (size_t at = log.find(mark); at != std::string::npos; at = log.find(mark, at + 1)) {
    const pid_t pid = std::stoi(log.substr(log.find("(pid ", at) + 5));
    ++started;
    EXPECT_NE(kill(pid, 0), 0) << "pid " << pid << " survived the launcher";
  }
  EXPECT_EQ(started, 5) << log;  // scheduler, 2 servers, 2 trainers
}

}  // namespace
}  // namespace strata
