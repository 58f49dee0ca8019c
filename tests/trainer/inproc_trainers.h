// inproc_trainers.h: InprocTrainersTest, a fixture for communicator tests: a scheduler and
// `ranks` trainer nodes joined over the in-process transport (the nodes' kv store is the
// scheduler's, which is what communicators rendezvous through), plus the CPU reference of a
// reduction over every rank's input.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cluster/inproc_cluster.h"
#include "common/mesh.h"

namespace strata {

class InprocTrainersTest : public ::testing::Test {
 protected:
  // Starts the scheduler and joins `ranks` trainers (rank r at mem://trainer<r>).
  void StartTrainers(int ranks) {
    ClusterOptions cluster;
    cluster.heartbeat_interval_ms = 50;
    cluster.heartbeat_timeout_ms = 5000;
    auto started = StartInprocTrainers(ranks, cluster);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    inproc_ = std::move(started).value();
    for (auto& n : inproc_->nodes) nodes_.push_back(n.get());
  }

  std::unique_ptr<InprocCluster> inproc_;
  std::vector<Node*> nodes_;  // rank r's
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
