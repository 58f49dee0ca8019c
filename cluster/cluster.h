// cluster.h: the cluster view as plain values (roles, node records, the view with its epoch)
// and their conversion to and from the wire schema. Node ids: 0 is the scheduler, then the
// servers in rank order, then the trainers in rank order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/wire.capnp.h"

namespace strata {

enum class Role : uint8_t { kScheduler = 0, kServer = 1, kTrainer = 2, kClient = 3 };
std::string_view RoleName(Role role);
Result<Role> ParseRole(std::string_view name);

inline constexpr uint32_t kSchedulerId = 0;
// Ends the Unavailable error a restarted scheduler answers a node it does not know yet with;
// the node re-registers and repeats its call (Node::CallScheduler).
inline constexpr std::string_view kRejoinFirst = "re-register first";
// In the FailedPrecondition the scheduler answers a heartbeat of a node it declared dead with
// (the node stalled past cluster.heartbeat_timeout_ms while it ran): Node hears it there.
inline constexpr std::string_view kDeclaredDead = "declared dead while it ran";
// In the FailedPrecondition the scheduler answers a heartbeat or deregister with when a newer
// process holds the sender's rank (it was declared dead and replaced while it stalled): the old
// process must end without touching the job.
inline constexpr std::string_view kSuperseded = "a newer process holds its rank";
// Envelope.incarnation when a message does not say it.
inline constexpr uint32_t kIncarnationNotSaid = 0xffffffff;

struct NodeInfo {
  uint32_t id = 0;
  Role role = Role::kServer;
  int rank = -1;
  std::string address;
  bool alive = false;
  uint32_t incarnation = 0;
  // Elastic jobs: it deregistered (a server only after handing its keys to the others); its
  // rank is not taken again.
  bool left = false;
  // Elastic jobs: a server that joined and does not serve yet (its keys are still moving to it).
  // One that dies so is marked left, not dead: its join is rolled back (docs/reliability.md).
  bool joining = false;

  // "server 1 (node 2, tcp://127.0.0.1:4001)": how errors and logs name a node.
  std::string Describe() const;
};

struct ClusterView {
  uint64_t epoch = 0;
  std::vector<NodeInfo> nodes;  // sorted by id

  // The node points into this view: Find on a temporary (node.view().Find(...)) would dangle
  // at the end of the statement, so it does not compile. Keep the view: `const auto v = node.view();`.
  const NodeInfo* Find(uint32_t id) const&;
  const NodeInfo* Find(Role role, int rank) const&;
  const NodeInfo* Find(uint32_t id) const&& = delete;
  const NodeInfo* Find(Role role, int rank) const&& = delete;
  std::vector<NodeInfo> WithRole(Role role) const;
  int Count(Role role) const;
};

void ToWire(const NodeInfo& in, wire::NodeInfo::Builder out);
void ToWire(const ClusterView& in, wire::ClusterView::Builder out);
NodeInfo FromWire(wire::NodeInfo::Reader in);
ClusterView FromWire(wire::ClusterView::Reader in);

}  // namespace strata
