// inproc_trainers.h: InprocTrainersTest, a fixture for communicator tests: a scheduler and
// `ranks` trainer nodes joined over the in-process transport (the nodes' kv store is the
// scheduler's, which is what communicators rendezvous through), plus the CPU reference of a
// reduction over every rank's input.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "cluster/node.h"
#include "cluster/scheduler.h"
#include "common/inproc_transport.h"
#include "common/mesh.h"

namespace strata {

class InprocTrainersTest : public ::testing::Test {
 protected:
  // Starts the scheduler and joins `ranks` trainers (rank r at mem://trainer<r>).
  void StartTrainers(int ranks) {
    cluster_.scheduler = "mem://scheduler";
    cluster_.servers = 0;
    cluster_.trainers = ranks;
    cluster_.heartbeat_interval_ms = 50;
    cluster_.heartbeat_timeout_ms = 5000;
    scheduler_ = std::make_unique<Scheduler>(SchedulerOptions{cluster_},
                                             std::make_unique<InprocTransport>(&hub_));
    ASSERT_TRUE(scheduler_->Start("mem://scheduler").ok());
    for (int r = 0; r < ranks; ++r) {
      NodeOptions o;
      o.cluster = cluster_;
      o.role = Role::kTrainer;
      o.bind = "mem://trainer" + std::to_string(r);
      o.requested_rank = r;
      nodes_.push_back(std::make_unique<Node>(o, &hub_));
    }
    std::vector<std::future<Status>> joins;
    for (auto& n : nodes_) joins.push_back(std::async(std::launch::async, [&n] { return n->Join(); }));
    for (auto& j : joins) ASSERT_TRUE(j.get().ok());
  }

  InprocHub hub_;
  ClusterOptions cluster_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

// The reduction by `op` over ranks 0..n-1 of input(rank), in rank order (as a ring computes a
// sum of small integers exactly, any order gives the same floats).
template <typename Input>
float ReferenceReduce(ReduceOp op, int n, Input input) {
  float want = input(0);
  for (int k = 1; k < n; ++k) {
    const float x = input(k);
    want = op == ReduceOp::kMax   ? std::max(want, x)
           : op == ReduceOp::kMin ? std::min(want, x)
                                  : want + x;
  }
  return op == ReduceOp::kAvg ? want / static_cast<float>(n) : want;
}

}  // namespace strata
