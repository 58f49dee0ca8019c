// cluster.cc: cluster view helpers and wire conversion.
#include "cluster/cluster.h"

namespace strata {

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kScheduler: return "scheduler";
    case Role::kServer: return "server";
    case Role::kTrainer: return "trainer";
    case Role::kClient: return "client";
  }
  return "unknown";
}

Result<Role> ParseRole(std::string_view name) {
  for (Role r : {Role::kScheduler, Role::kServer, Role::kTrainer, Role::kClient}) {
    if (RoleName(r) == name) return r;
  }
  return Status::InvalidArgument("unknown role \"" + std::string(name) +
                                 "\" (expected scheduler, server, trainer or client)");
}

std::string NodeInfo::Describe() const {
  return std::string(RoleName(role)) + " " + std::to_string(rank) + " (node " +
         std::to_string(id) + ", " + address + ")";
}

const NodeInfo* ClusterView::Find(uint32_t id) const& {
  for (const auto& n : nodes) {
    if (n.id == id) return &n;
  }
  return nullptr;
}

const NodeInfo* ClusterView::Find(Role role, int rank) const& {
  for (const auto& n : nodes) {
    if (n.role == role && n.rank == rank) return &n;
  }
  return nullptr;
}

std::vector<NodeInfo> ClusterView::WithRole(Role role) const {
  std::vector<NodeInfo> out;
  for (const auto& n : nodes) {
    if (n.role == role) out.push_back(n);
  }
  return out;
}

int ClusterView::Count(Role role) const {
  int c = 0;
  for (const auto& n : nodes) c += n.role == role;
  return c;
}

void ToWire(const NodeInfo& in, wire::NodeInfo::Builder out) {
  out.setId(in.id);
  out.setRole(static_cast<wire::Role>(in.role));
  out.setRank(in.rank);
  out.setAddress(in.address);
  out.setAlive(in.alive);
  out.setIncarnation(in.incarnation);
  out.setLeft(in.left);
  out.setJoining(in.joining);
}

void ToWire(const ClusterView& in, wire::ClusterView::Builder out) {
  out.setEpoch(in.epoch);
  auto list = out.initNodes(static_cast<unsigned>(in.nodes.size()));
  for (unsigned i = 0; i < in.nodes.size(); ++i) ToWire(in.nodes[i], list[i]);
}

NodeInfo FromWire(wire::NodeInfo::Reader in) {
  NodeInfo n;
  n.id = in.getId();
  n.role = static_cast<Role>(in.getRole());  // range checked by Decode
  n.rank = in.getRank();
  n.address = in.getAddress().cStr();
  n.alive = in.getAlive();
  n.incarnation = in.getIncarnation();
  n.left = in.getLeft();
  n.joining = in.getJoining();
  return n;
}

ClusterView FromWire(wire::ClusterView::Reader in) {
  ClusterView v;
  v.epoch = in.getEpoch();
  for (auto n : in.getNodes()) v.nodes.push_back(FromWire(n));
  return v;
}

}  // namespace strata
