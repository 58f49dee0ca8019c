// mem_node.h: a Node on the in-process transport (mem://name), with the settings the unit
// tests' clusters share: the job's cluster options and a 10 s request timeout.
#pragma once

#include <memory>
#include <string>

#include "cluster/node.h"
#include "common/inproc_transport.h"

namespace strata::testing {

inline std::unique_ptr<Node> MakeMemNode(const ClusterOptions& cluster, InprocHub* hub, Role role,
                                         const std::string& name, int rank, bool join = false) {
  NodeOptions o;
  o.cluster = cluster;
  o.transport.request_timeout_ms = 10000;
  o.role = role;
  o.bind = "mem://" + name;
  o.requested_rank = rank;
  o.join = join;
  return std::make_unique<Node>(o, hub);
}

}  // namespace strata::testing
