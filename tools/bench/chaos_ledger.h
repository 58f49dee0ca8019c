// chaos_ledger.h: the ledger of strata-bench chaos: one server (or two with replication) and
// two in-process trainers pushing counted increments while the servers are killed -9 and
// started again; at the end every key's value says how many of its increments were applied,
// against how many were acknowledged.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "common/status.h"

namespace strata::bench {

class ChaosCluster;

struct LedgerOptions {
  std::string bin_dir;  // where strata-scheduler and strata-server are
  std::filesystem::path work;
  int cycles = 5;                // kill -9 + restart of a server, every fault_interval_s
  double fault_interval_s = 1.0;
  double drop_rate = 0.02;       // of the server's outgoing messages (without replication)
  bool replication = false;      // two servers with server.replication: backup, killed in turn
  // Kills server `rank` -9 and starts it again, returning once it serves (and, replicated,
  // once it holds copies of its shards again).
  std::function<Status(ChaosCluster&, int rank)> kill_and_restart;
};

// Increments are counted per key. An acknowledged push was applied; a push whose wait failed
// may or may not have been (its reply, or the retry's, was lost with the process that applied
// it, say): its increments are `uncertain`. A key whose value falls below its acknowledged
// count lost updates; one above acknowledged + uncertain applied some twice.
struct LedgerFigures {
  uint64_t acknowledged = 0, applied = 0, lost = 0, duplicated = 0;
  uint64_t uncertain = 0;          // increments of failed pushes
  uint64_t failed_applied = 0;     // of those, found applied
  uint64_t retries = 0, failed = 0;  // retried requests; pushes whose wait failed
  int kills = 0;
  int trainer_rejoins = 0;  // times an in-process trainer declared dead came back
  std::string error;
  std::string first_failure;  // why the first failed push failed
};

LedgerFigures RunLedger(const LedgerOptions& o);

}  // namespace strata::bench
