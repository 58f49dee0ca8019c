// node_test.cc: Node over real TCP sockets: a scheduler that cannot be reached is an error
// naming its host and port within cluster.connect_timeout_ms, and a node bound on every
// interface registers an address peers can dial.
#include "cluster/node.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "cluster/scheduler.h"
#include "common/transport.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(NodeTcpTest, UnreachableSchedulerIsAnErrorNamingHostAndPort) {
  NodeOptions o;
  o.cluster.scheduler = "tcp://127.0.0.1:1";  // privileged, nothing listens
  o.cluster.connect_timeout_ms = 500;
  o.cluster.join_timeout_ms = 600000;  // a hang would be this long
  Node node(o);
  const auto start = std::chrono::steady_clock::now();
  Status s = node.Join();
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.ToString(), HasSubstr("host 127.0.0.1, port 1"));
  EXPECT_THAT(s.ToString(), HasSubstr("scheduler"));
  EXPECT_LT(took, std::chrono::seconds(10));
}

TEST(NodeTcpTest, WildcardBindAdvertisesAReachableHost) {
  ClusterOptions cluster;
  cluster.servers = 1;
  cluster.trainers = 1;
  cluster.join_timeout_ms = 20000;
  auto transport = MakeTransport("tcp://127.0.0.1:0", TransportOptions{});
  ASSERT_TRUE(transport.ok());
  Scheduler scheduler(SchedulerOptions{cluster}, std::move(transport).value());
  auto address = scheduler.Start("tcp://127.0.0.1:0");
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  cluster.scheduler = *address;

  auto make = [&](Role role, const std::string& advertise) {
    NodeOptions o;
    o.cluster = cluster;
    o.role = role;
    o.bind = "tcp://*:0";
    o.advertise_host = advertise;
    return std::make_unique<Node>(o);
  };
  auto server = make(Role::kServer, "localhost");
  auto trainer = make(Role::kTrainer, "127.0.0.1");
  auto joined = std::async(std::launch::async, [&] { return server->Join(); });
  ASSERT_TRUE(trainer->Join().ok());
  ASSERT_TRUE(joined.get().ok());
  EXPECT_THAT(server->address(), StartsWith("tcp://localhost:"));
  EXPECT_THAT(trainer->address(), StartsWith("tcp://127.0.0.1:"));
  // The advertised addresses work: the two meet at a barrier through the scheduler, and the
  // trainer dials the server directly.
  auto barrier = std::async(std::launch::async, [&] { return server->Barrier("b"); });
  ASSERT_TRUE(trainer->Barrier("b").ok());
  ASSERT_TRUE(barrier.get().ok());
  auto peer = trainer->rpc().Connect(server->address());
  ASSERT_TRUE(peer.ok());
  Message echo;
  echo.builder().getBody().setEcho();
  EXPECT_TRUE(trainer->rpc().CallAndWait(*peer, std::move(echo), Millis(5000)).ok());
  ASSERT_TRUE(server->Leave().ok());
  ASSERT_TRUE(trainer->Leave().ok());
  scheduler.Stop();
}

// A scheduler gone for good: a node says so once its heartbeats have had no answer for
// cluster.scheduler_timeout_ms (strata-trainer and strata-server then exit with this error).
TEST(NodeTcpTest, LosingTheSchedulerPastTheTimeoutIsAnErrorNamingIt) {
  ClusterOptions cluster;
  cluster.servers = 0;
  cluster.trainers = 1;
  cluster.heartbeat_interval_ms = 50;
  cluster.heartbeat_timeout_ms = 1000;
  cluster.scheduler_timeout_ms = 500;
  auto transport = MakeTransport("tcp://127.0.0.1:0", TransportOptions{});
  ASSERT_TRUE(transport.ok());
  auto scheduler = std::make_unique<Scheduler>(SchedulerOptions{cluster}, std::move(transport).value());
  auto address = scheduler->Start("tcp://127.0.0.1:0");
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  cluster.scheduler = *address;
  NodeOptions o;
  o.cluster = cluster;
  o.role = Role::kTrainer;
  o.bind = "tcp://127.0.0.1:0";
  Node node(o);
  ASSERT_TRUE(node.Join().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // past the timeout, answered
  EXPECT_TRUE(node.SchedulerStatus().ok()) << node.SchedulerStatus().ToString();
  scheduler->Stop();
  scheduler.reset();
  const auto lost = std::chrono::steady_clock::now();
  while (node.SchedulerStatus().ok() && std::chrono::steady_clock::now() - lost < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const Status s = node.SchedulerStatus();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.ToString(), HasSubstr("lost the scheduler at " + *address));
  EXPECT_THAT(s.ToString(), HasSubstr("cluster.scheduler_timeout_ms 500"));
  (void)node.Leave(Millis(200));  // the scheduler is gone: leaving times out, quickly
}

}  // namespace
}  // namespace strata
