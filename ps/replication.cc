// replication.cc: the shard rules of replication.h.
#include "ps/replication.h"

#include "common/check.h"

namespace strata {

uint32_t RingNext(uint32_t rank, const PsLayout& layout) {
  for (uint32_t i = 1; i < layout.servers; ++i) {
    const uint32_t r = (rank + i) % layout.servers;
    if (!layout.Left(r)) return r;
  }
  return rank;
}

uint32_t RingPrev(uint32_t rank, const PsLayout& layout) {
  for (uint32_t i = 1; i < layout.servers; ++i) {
    const uint32_t r = (rank + layout.servers - i) % layout.servers;
    if (!layout.Left(r)) return r;
  }
  return rank;
}

uint32_t NextHolder(const ClusterView& view, const PsLayout& layout, uint32_t shard, uint32_t current, bool refused,
                    Replication replication) {
  if (replication == Replication::kNone) return shard;
  if (RingSize(layout) < 2) return shard;
  auto up = [&](uint32_t rank) {
    const NodeInfo* n = view.Find(Role::kServer, static_cast<int>(rank));
    return n && n->alive && !n->left;
  };
  const uint32_t other = OtherHolder(shard, current, layout);
  return (refused || !up(current)) && up(other) ? other : current;
}

Message ForwardedCopy(const Message& request, uint32_t shard) {
  Message m;
  auto in = request.reader();
  m.set_shard(static_cast<int32_t>(shard));
  m.set_origin(request.sender());
  auto out = m.builder();
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
