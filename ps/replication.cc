// replication.cc: the shard rules of replication.h.
#include "ps/replication.h"

#include "common/check.h"

namespace strata {

bool Original(const ClusterView& view, uint32_t rank) {
  const NodeInfo* n = view.Find(Role::kServer, static_cast<int>(rank));
  return n && n->alive && n->incarnation == 0;
}

Result<uint32_t> ServingRank(const ClusterView& view, uint32_t shard, Replication replication) {
  if (replication == Replication::kNone) return shard;
  const auto servers = static_cast<uint32_t>(view.Count(Role::kServer));
  if (Original(view, shard)) return shard;
  const uint32_t backup = BackupRank(shard, servers);
  if (backup != shard && Original(view, backup)) return backup;
  auto describe = [&](uint32_t rank) {
    const NodeInfo* n = view.Find(Role::kServer, static_cast<int>(rank));
    if (!n) return "server " + std::to_string(rank) + " (not in the view)";
    return n->Describe() + (n->alive ? " (restarted: incarnation " + std::to_string(n->incarnation) + ")" : " (dead)");
  };
  return Status::Unavailable("shard " + std::to_string(shard) + " has no server holding it: its primary " +
                             describe(shard) + " and its backup " + describe(backup) + " are both gone");
}

Message ForwardedCopy(const Message& request, uint32_t shard) {
  Message m;
  auto in = request.reader();
  auto out = m.builder();
  out.setShard(static_cast<int32_t>(shard));
  out.setOrigin(request.sender());
  switch (request.op()) {
    case Op::PUSH: out.getBody().setPush(in.getBody().getPush()); break;
    case Op::CLOCK: out.getBody().setClock(in.getBody().getClock()); break;
    case Op::CREATE_TABLE: out.getBody().setCreateTable(in.getBody().getCreateTable()); break;
    default: STRATA_CHECK(false) << "forwarding " << OpName(request.op()) << " to a backup";
  }
  for (size_t i = 0; i < request.num_payloads(); ++i) {
    const PayloadInfo p = request.payload_info(i);
    m.AddPayload(p.dtype, p.shape, *p.buffer);
  }
  return m;
}

uint64_t PayloadBytes(const Message& m) {
  uint64_t n = 0;
  for (size_t i = 0; i < m.num_payloads(); ++i) n += m.payload(i).size();
  return n;
}

}  // namespace strata
