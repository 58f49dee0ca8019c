// mem_node.h: a Node on the in-process transport (mem://name), with the settings the unit
// tests' clusters share: the job's cluster options and a 10 s request timeout (`transport`
// overrides that and may add faults: the node's outgoing messages dropped or delayed).
#pragma once

#include <memory>
#include <string>

#include "cluster/node.h"
#include "common/inproc_transport.h"

namespace strata::testing {

inline std::unique_ptr<Node> MakeMemNode(const ClusterOptions& cluster, InprocHub* hub, Role role,
                                         const std::string& name, int rank, bool join = false,
                                         const TransportOptions* transport = nullptr) {
  NodeOptions o;
  o.cluster = cluster;
  if (transport) o.transport = *transport;
  else o.transport.request_timeout_ms = 10000;
  o.role = role;
  o.bind = "mem://" + name;
  o.requested_rank = rank;
  o.join = join;
  return std::make_unique<Node>(o, hub);
}

}  // namespace strata::testing
