// replication.h: primary-backup replication of the servers' shards (server.replication), the
// rules every process applies alike: which servers hold a shard, where a trainer sends a
// shard's requests, and the copy of a request a serving server forwards to its backup.
//
// Shard r (the keys the layout, ps/layout.h, gives rank r) is held by two servers: rank r and
// the next rank of the ring (BackupRank; (r + 1) % S while no server joined or left). One of them serves it (at the start, rank r: the primary); the other, when
// it holds a complete copy, is its backup. The serving one applies each request that changes
// state (push, push-pull, clock, createTable), forwards it to the backup in the order it applied
// them and answers the sender once the backup acknowledged it; the backup applies it through the
// same code, under the sender's push id. When the serving server dies its backup serves the
// shard (take-over). A dead server started again holds nothing: it asks the server now serving
// each of its two shards for a copy (a state transfer: the rows, optimizer state, push ids and
// clocks, sent in order before the updates forwarded after it) and is their backup from then on.
// A server asked for a shard it does not serve answers Unavailable ending in kNotServing; a
// trainer then tries the shard's other holder (NextHolder).
#pragma once

#include <cstdint>
#include <string_view>

#include "cluster/cluster.h"
#include "common/message.h"
#include "common/status.h"
#include "ps/layout.h"

namespace strata {

enum class Replication { kNone, kBackup };

// The servers form a ring in rank order over the layout's ranks still in the job (PsLayout: an
// elastic job's servers join at the end and leave from anywhere but rank 0). Shard r's backup is
// the next rank of that ring after r, so a join moves one backup (the last shard's, to the
// joining server, whose own shard's backup is then server 0's) and a leave of rank k moves the
// backup of k's previous rank to k's next one. Without elastic servers the ring is 0..S-1.
// The next rank of the ring after `rank` (`rank` itself if the only one left).
uint32_t RingNext(uint32_t rank, const PsLayout& layout);
// The rank of the ring before `rank`.
uint32_t RingPrev(uint32_t rank, const PsLayout& layout);
// The server rank holding the backup of shard `shard`.
inline uint32_t BackupRank(uint32_t shard, const PsLayout& layout) { return RingNext(shard, layout); }
// The shard whose backup server rank `rank` holds.
inline uint32_t BackedUpShard(uint32_t rank, const PsLayout& layout) { return RingPrev(rank, layout); }
// The holder of shard `shard` that is not `holder` (one of its two holders).
inline uint32_t OtherHolder(uint32_t shard, uint32_t holder, const PsLayout& layout) {
  return holder == shard ? BackupRank(shard, layout) : shard;
}
// How many ranks the ring has.
inline uint32_t RingSize(const PsLayout& layout) {
  return layout.servers - static_cast<uint32_t>(layout.left.size());
}
// The layout of a job whose `servers` servers never change.
inline PsLayout FixedLayout(uint32_t servers) { return PsLayout{servers, servers, {}}; }

// What the Unavailable error of a server asked for a shard it holds but does not serve says.
inline constexpr std::string_view kNotServing = "does not serve shard";
// What a server that serves a shard answers an update of it forwarded by the other holder: that
// one was declared dead (while alive, e.g. stalled past the heartbeat timeout) and this one took
// the shard over. The forwarding server steps down (serves the shard no more) and answers its
// sender kNotServing, which sends the update here.
inline constexpr std::string_view kTookOver = "took the shard over";

// Where a trainer sends shard `shard`'s requests next, having sent them to holder `current`:
// the other holder under `layout` when `current` is down or left in `view` or answered
// kNotServing (`refused`) and the other one is up; else `current`. Without replication: always
// the shard's own rank.
uint32_t NextHolder(const ClusterView& view, const PsLayout& layout, uint32_t shard, uint32_t current, bool refused,
                    Replication replication);

// The copy of `request` (push, clock or createTable) that the server serving shard `shard`
// sends to its backup: the same body and payloads (shared, not copied), `origin` the request's
// sender. Its request id is set by the sender's RpcEndpoint.
Message ForwardedCopy(const Message& request, uint32_t shard);

// Payload bytes of a message (what replication counts as replicated bytes).
uint64_t PayloadBytes(const Message& m);

}  // namespace strata
