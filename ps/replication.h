// replication.h: primary-backup replication of the servers' shards (server.replication), the
// rules every process applies alike: which server holds a shard's backup, which one serves the
// shard under a given view, and the copy of a request a primary forwards to its backup.
//
// Shard r (the keys SparseServer/DenseServer give rank r) has its primary on server rank r and
// its backup on rank (r + 1) % S. The primary applies each request that changes state (push,
// push-pull, clock, createTable), forwards it to the backup in the order it applied them and
// answers the sender once the backup acknowledged it; the backup applies it through the same
// code, under the sender's push id. Only a server that has run since the job started holds a
// complete copy (its incarnation is still 0: the scheduler bumps it when a dead rank registers
// again), so a shard is served by its primary while that is alive and original, else by its
// backup while that is, else by nobody (ServingRank says Unavailable naming both).
#pragma once

#include <cstdint>

#include "cluster/cluster.h"
#include "common/message.h"
#include "common/status.h"

namespace strata {

enum class Replication { kNone, kBackup };

// The server rank holding the backup of shard `shard` of `servers` (at least 2).
inline uint32_t BackupRank(uint32_t shard, uint32_t servers) { return (shard + 1) % servers; }
// The shard whose backup server rank `rank` holds.
inline uint32_t BackedUpShard(uint32_t rank, uint32_t servers) { return (rank + servers - 1) % servers; }

// Whether server rank `rank` in `view` is alive and has run since the job started.
bool Original(const ClusterView& view, uint32_t rank);

// The server rank that serves shard `shard`'s requests under `view`. Without replication: the
// shard's own rank (alive or not: a restarted server reloads its store). With it: the primary
// while Original, else the backup while Original, else Unavailable naming both.
Result<uint32_t> ServingRank(const ClusterView& view, uint32_t shard, Replication replication);

// The copy of `request` (push, clock or createTable) that the primary of shard `shard` sends to
// the backup: the same body and payloads (shared, not copied), `origin` the request's sender.
// Its request id is set by the sender's RpcEndpoint.
Message ForwardedCopy(const Message& request, uint32_t shard);

// Payload bytes of a message (what replication counts as replicated bytes).
uint64_t PayloadBytes(const Message& m);

}  // namespace strata
