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
#include "ps/server_options.h"
#include "trainer/train_options.h"

namespace CLI {
class App;
}  // namespace CLI

namespace strata {

// One file describes the whole job; every binary reads all of it (and uses its sections).
struct JobConfig {
  ClusterOptions cluster;
  TransportOptions transport;
  LogOptions log;  // only `level` is read from the job; role and rank are set by main()
  ServerOptions server;  // strata-server (ps/server_options.h)
  // strata-trainer's sections (model, optimizer, train, data, sync; trainer/train_options.h),
  // top-level sections of the file like the others.
  TrainJob trainer;
};

void Bind(config::Binder& b, JobConfig& o);

// Reads `path` (empty: start from the defaults), applies `overrides` ("a.b=value", in order,
// later ones win) and validates the result. Every error in the file and the overrides is
// reported at once, one per line, naming its field and where it came from.
Result<JobConfig> LoadJobConfig(const std::string& path,
                                const std::vector<std::string>& overrides);

// cluster.elastic's cross-section rules: sync.mode ps, consistency asp or ssp, no parallel.auto
// (InvalidArgument naming the fields). LoadJobConfig applies it.
Status CheckElasticJob(const JobConfig& job);

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
