// job_config.h: JobConfig, the job file every strata binary reads (one section per layer's
// options), and the flags that load it: --config FILE, --set KEY=VALUE, --print-config.
//
// In main():
//   CLI::App app{"strata-server: holds a shard of the parameters"};
//   JobFlags flags;
//   AddJobFlags(app, flags);
//   CLI11_PARSE(app, argc, argv);
//   Result<JobConfig> job = ResolveJobConfig(flags);
//   if (!job.ok()) { std::cerr << job.status().ToString() << "\n"; return 2; }
//   if (flags.print_config) { std::cout << JobConfigToYaml(*job); return 0; }
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/logging.h"
#include "common/options.h"
#include "common/status.h"
#include "offload/tiered_row_store.h"
#include "trainer/train_options.h"

namespace CLI {
class App;
}  // namespace CLI

namespace strata {

enum class StoreKind { kMemory, kTiered };

// Where a server keeps its shard of every table (server.store in the job file).
struct ServerStoreConfig {
  // memory: MemoryRowStore, nothing survives the process. tiered: TieredRowStore (DRAM over
  // RocksDB) under `path`, one store per table at <path>/server-<rank>/table-<id>, and the
  // table specs recorded in <path>/server-<rank>/tables, so a restarted server reloads them.
  StoreKind kind = StoreKind::kMemory;
  // Directory of the tiered stores (required for tiered). Servers on one machine may share it.
  std::string path;
  // DRAM budget of each table's resident records. Larger: more hits, fewer disk reads.
  uint64_t dram_budget_mb = 256;
  EvictionPolicy policy = EvictionPolicy::kLru;
  // none: a crash loses what was not written back. checkpoint: a restart restores the last
  // checkpoint exactly (taken every checkpoint_every_clocks clocks of the slowest trainer).
  // wal: every acknowledged push survives kill -9, at a synced write per push.
  Durability durability = Durability::kNone;
  uint64_t checkpoint_every_clocks = 0;
};

struct ServerConfig {
  int workers = 2;                // threads applying pushes (one sender's requests on one)
  int stats_interval_ms = 10000;  // log statistics this often (0: never)
  ServerStoreConfig store;
};

// One file describes the whole job; every binary reads all of it (and uses its sections).
struct JobConfig {
  ClusterOptions cluster;
  TransportOptions transport;
  LogOptions log;  // only `level` is read from the job; role and rank are set by main()
  ServerConfig server;
  // strata-trainer's sections (model, optimizer, train, data, sync; trainer/train_options.h),
  // top-level sections of the file like the others.
  TrainJob trainer;
};

void Bind(config::Binder& b, ServerStoreConfig& o);
void Bind(config::Binder& b, ServerConfig& o);
void Bind(config::Binder& b, JobConfig& o);

// Reads `path` (empty: start from the defaults), applies `overrides` ("a.b=value", in order,
// later ones win) and validates the result. Every error in the file and the overrides is
// reported at once, one per line, naming its field and where it came from.
Result<JobConfig> LoadJobConfig(const std::string& path,
                                const std::vector<std::string>& overrides);

// The job-related command line of every binary.
struct JobFlags {
  std::string config_path;             // --config,-c FILE (must exist)
  std::vector<std::string> overrides;  // --set KEY=VALUE, repeatable
  bool print_config = false;           // --print-config: print the effective job and exit
};

// Registers the flags above, and a --help footer listing every job field with its type,
// default, limits and doc.
void AddJobFlags(CLI::App& app, JobFlags& flags);

// LoadJobConfig(flags.config_path, flags.overrides).
Result<JobConfig> ResolveJobConfig(const JobFlags& flags);

// The common start of every binary's main(): resolves the job into *job. Returns the exit code
// main() should return now (2 after printing the error, naming `program`; 0 after
// --print-config printed the job), or nullopt to go on.
std::optional<int> LoadJobOrExit(const JobFlags& flags, const char* program, JobConfig* job);

// The effective job as YAML text (what --print-config prints and a binary logs at start);
// reading it back gives the same JobConfig.
std::string JobConfigToYaml(const JobConfig& job);

}  // namespace strata
