// scheduler_fixture.h: SchedulerTest, a scheduler and nodes as threads in one process over the
// in-process transport, shared by the scheduler's unit tests.
#pragma once

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "cluster/node.h"
#include "cluster/scheduler.h"
#include "common/inproc_transport.h"
#include "mem_node.h"
#include "test_util.h"

namespace strata::testing {

// Set cluster_.elastic before StartScheduler for an elastic job.
class SchedulerTest : public ::testing::Test {
 protected:
  void StartScheduler(int servers, int trainers) {
    cluster_.scheduler = "mem://scheduler";
    cluster_.servers = servers;
    cluster_.trainers = trainers;
    cluster_.heartbeat_interval_ms = 20;
    cluster_.heartbeat_timeout_ms = 2000;  // generous: a loaded CI machine must not fake deaths
    cluster_.join_timeout_ms = 10000;
    scheduler_ = std::make_unique<Scheduler>(SchedulerOptions{cluster_},
                                             std::make_unique<InprocTransport>(&hub_));
    ASSERT_TRUE(scheduler_->Start("mem://scheduler").ok());
  }

  std::unique_ptr<Node> MakeNode(Role role, const std::string& name, int rank = -1, bool join = false,
                                 const TransportOptions* transport = nullptr) {
    return testing::MakeMemNode(cluster_, &hub_, role, name, rank, join, transport);
  }

  // Joins every node concurrently (registration only completes when all are in).
  void JoinAll(std::vector<std::unique_ptr<Node>>& nodes) {
    std::vector<std::future<Status>> joins;
    for (auto& n : nodes) joins.push_back(std::async(std::launch::async, [&n] { return n->Join(); }));
    for (auto& j : joins) ASSERT_TRUE(j.get().ok());
  }

  // A bare endpoint that speaks to the scheduler directly, for hostile or silent nodes.
  struct RawClient {
    std::unique_ptr<RpcEndpoint> rpc;
    PeerId scheduler;
  };
  RawClient Raw() {
    RawClient c{std::make_unique<RpcEndpoint>(std::make_unique<InprocTransport>(&hub_),
                                              RpcOptions{std::chrono::milliseconds(10000), {}}),
                0};
    c.scheduler = *c.rpc->Connect("mem://scheduler");
    return c;
  }
  static Message Register(wire::Role role, const std::string& address, int rank = -1,
                          uint32_t pid = 1) {
    Message m;
    auto r = m.builder().getBody().initRegister();
    r.setRole(role);
    r.setAddress(address);
    r.setRequestedRank(rank);
    r.setHostname("test");
    r.setPid(pid);
    return m;
  }

  InprocHub hub_;
  ClusterOptions cluster_;
  std::unique_ptr<Scheduler> scheduler_;
};

}  // namespace strata::testing
