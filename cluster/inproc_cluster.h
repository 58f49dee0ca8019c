// inproc_cluster.h: InprocCluster, a scheduler and n trainer nodes in this process over an
// InprocHub, joined: the rendezvous of collectives run as threads (benchmarks, the planner's
// measurements, tests).
#pragma once

#include <memory>
#include <vector>

#include "cluster/node.h"
#include "cluster/scheduler.h"
#include "common/inproc_transport.h"

namespace strata {

// Members are destroyed nodes first, then the scheduler, then the hub they all use.
struct InprocCluster {
  InprocHub hub;
  ClusterOptions options;
  std::unique_ptr<Scheduler> scheduler;
  std::vector<std::unique_ptr<Node>> nodes;  // trainer r at mem://trainer<r>, rank r
};

// Starts the scheduler at mem://scheduler and joins `trainers` trainer nodes (in parallel, as a
// cluster forms). `cluster` gives the heartbeat settings; its scheduler and counts are set here.
Result<std::unique_ptr<InprocCluster>> StartInprocTrainers(int trainers, ClusterOptions cluster = {});

}  // namespace strata
