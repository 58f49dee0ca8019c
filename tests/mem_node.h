// mem_node.h: a Node on the in-process transport (mem://name), with the settings the unit
// tests' clusters share: the job's cluster options and a 10 s request timeout (`transport`
// overrides that and may add faults: the node's outgoing messages dropped or delayed).
#pragma once

#include <memory>
#include <string>

#include "cluster/node.h"
#include "common/inproc_transport.h"
#include "test_util.h"

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

// Polls `watcher`'s view (asked for again each time) until server `rank` is dead in it: a node
// that stopped without leaving, once the scheduler declared it dead. False after `timeout`.
inline bool WaitUntilServerDead(Node& watcher, int rank, std::chrono::milliseconds timeout) {
  return WaitFor(
      [&] {
        const auto v = watcher.RefreshView();
        const NodeInfo* n = v.ok() ? v->Find(Role::kServer, rank) : nullptr;
        return n && !n->alive;
      },
      timeout);
}

}  // namespace strata::testing
