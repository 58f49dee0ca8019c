// server_options.cc: the job-file binding of ServerOptions.
#include "ps/server_options.h"

#include "common/config.h"

namespace strata {

void Bind(config::Binder& b, ServerStoreOptions& o) {
  b.Enum("kind", o.kind, {{"memory", StoreKind::kMemory}, {"tiered", StoreKind::kTiered}},
         "memory: DRAM only, lost with the process; tiered: DRAM over RocksDB under `path`, "
         "reloaded when the server restarts with the same rank");
  b.Field("path", o.path,
          "directory of the tiered stores (<path>/server-<rank>/table-<id>); required for tiered");
  b.Field("dram_budget_mb", o.dram_budget_mb,
          "DRAM for each table's resident records in MiB (fractions allowed); larger: more hits, fewer "
          "disk reads")
      .Range(1.0 / 1024, double(uint64_t{1} << 24));
  b.Enum("policy", o.policy, {{"lru", EvictionPolicy::kLru}, {"lfu", EvictionPolicy::kLfu}},
         "DRAM eviction: lru for a sliding working set, lfu keeps a skewed popular head");
  b.Enum("durability", o.durability,
         {{"none", Durability::kNone}, {"checkpoint", Durability::kCheckpoint}, {"wal", Durability::kWal}},
         "none: a crash loses what was not written back; checkpoint: a restart restores the last "
         "checkpoint exactly; wal: every acknowledged push survives kill -9 (a synced write per push)");
  b.Field("checkpoint_every_clocks", o.checkpoint_every_clocks,
          "checkpoint durability: snapshot every this many clocks of the slowest trainer; more "
          "often loses less on a crash but blocks pushes for each snapshot")
      .Range(uint64_t{0}, uint64_t{1} << 40);
  b.Require(o.kind != StoreKind::kTiered || !o.path.empty(), "path", "is required by kind: tiered");
  b.Require(o.kind == StoreKind::kTiered || o.durability == Durability::kNone, "durability",
            "needs kind: tiered (the memory store keeps nothing)");
  b.Require(o.durability != Durability::kCheckpoint || o.checkpoint_every_clocks > 0,
            "checkpoint_every_clocks", "must be at least 1 with durability: checkpoint");
}

void Bind(config::Binder& b, ServerOptions& o) {
  b.Field("workers", o.workers, "threads applying pushes (one sender's requests go to one)")
      .Range(1, 256);
  b.Field("stats_interval_ms", o.stats_interval_ms, "log statistics this often (0: never)")
      .Range(0, 86400000);
  b.Field("max_parked_per_peer", o.max_parked_per_peer,
          "most pulls one peer may have waiting for their clock (bsp, ssp) here; past it a pull is "
          "refused with an error; bounds what a hostile peer can park")
      .Range(1, 1 << 24);
  b.Field("max_parked_mb_per_peer", o.max_parked_mb_per_peer,
          "most MiB of request payload (keys) one peer may have parked here")
      .Range(1, 1 << 20);
  b.Field("migrate_chunk_mb", o.migrate_chunk_mb,
          "rows handed to a joining server or from a leaving one (elastic jobs), and a replica's copy of a "
          "shard (replication), travel in chunks of at most this many MiB (fractions allowed; at most "
          "transport.max_message_mb); smaller: more messages")
      .Range(1.0 / 1024, double(1 << 20));
  b.Section("store", o.store, "where the server keeps its shard of every table");
  b.Enum("replication", o.replication, {{"none", Replication::kNone}, {"backup", Replication::kBackup}},
         "none: a dead server's shard waits for it to restart; backup: each shard also lives on the "
         "next server, which takes it over when its primary dies (needs 2+ servers, asp or ssp; with "
         "store.kind: tiered the copy has stores of its own under <path>/server-<rank>/backup-of-<shard>; "
         "docs/reliability.md)");
}

}  // namespace strata
