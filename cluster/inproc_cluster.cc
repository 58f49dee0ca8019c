// inproc_cluster.cc: StartInprocTrainers.
#include "cluster/inproc_cluster.h"

#include <future>
#include <string>

namespace strata {

Result<std::unique_ptr<InprocCluster>> StartInprocTrainers(int trainers, ClusterOptions cluster) {
  auto c = std::make_unique<InprocCluster>();
  cluster.scheduler = "mem://scheduler";
  cluster.servers = 0;
  cluster.trainers = trainers;
  c->options = cluster;
  c->scheduler = std::make_unique<Scheduler>(SchedulerOptions{cluster}, std::make_unique<InprocTransport>(&c->hub));
  STRATA_RETURN_IF_ERROR(c->scheduler->Start("mem://scheduler").status());
  for (int r = 0; r < trainers; ++r) {
    NodeOptions o;
    o.cluster = cluster;
    o.role = Role::kTrainer;
    o.bind = "mem://trainer" + std::to_string(r);
    o.requested_rank = r;
    c->nodes.push_back(std::make_unique<Node>(o, &c->hub));
  }
  std::vector<std::future<Status>> joins;
  for (auto& n : c->nodes) joins.push_back(std::async(std::launch::async, [&n] { return n->Join(); }));
  Status first;
  for (auto& j : joins) {
    if (Status s = j.get(); !s.ok() && first.ok()) first = s;
  }
  STRATA_RETURN_IF_ERROR(first.WithContext("joining " + std::to_string(trainers) + " in-process trainers"));
  return c;
}

}  // namespace strata
