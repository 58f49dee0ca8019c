// job_config.cc: the job file's top-level sections and the --config/--set/--print-config flags.
#include "tools/job_config.h"

#include <algorithm>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "trainer/auto/auto_plan.h"

namespace strata {

void Bind(config::Binder& b, JobConfig& o) {
  b.Section("cluster", o.cluster, "who is in the cluster and how membership is watched");
  b.Section("transport", o.transport, "messaging between processes (ZeroMQ)");
  b.Section("log", o.log, "logging");
  b.Section("server", o.server, "strata-server: workers and table storage");
  Bind(b, o.trainer);  // strata-trainer's sections, at the top level
}

namespace {

// server.replication against the other sections (a section's own Binder sees only its fields).
Status CheckReplication(const JobConfig& job) {
  if (job.server.replication == Replication::kBackup) {
    if (job.cluster.servers < 2) {
      return Status::InvalidArgument(
          "server.replication: backup needs cluster.servers of 2 or more (a shard's backup lives on "
          "another server), got " + std::to_string(job.cluster.servers));
    }
    // With cluster.elastic, trainers and servers come and go (the ring of backups follows the
    // layout, ps/replication.h); a SIGTERM'd first server stops so that its backup takes over.
  }
  return Status::OK();
}

// server.migrate_chunk_mb against transport.max_message_mb: a chunk's records are one frame.
// The default follows a smaller max_message_mb down; a value the job sets must fit.
Status CheckMigrateChunk(JobConfig& job, bool set) {
  if (!set) {
    job.server.migrate_chunk_mb = std::min<double>(job.server.migrate_chunk_mb, job.transport.max_message_mb);
  }
  if (job.server.migrate_chunk_mb > job.transport.max_message_mb) {
    std::ostringstream mb;
    mb << job.server.migrate_chunk_mb;
    return Status::InvalidArgument("server.migrate_chunk_mb: " + mb.str() + " MiB exceeds transport.max_message_mb (" +
                                   std::to_string(job.transport.max_message_mb) +
                                   " MiB), the largest frame a socket accepts; a chunk's records are one frame");
  }
  return Status::OK();
}

}  // namespace

Status CheckElasticJob(const JobConfig& job) {
  if (!job.cluster.elastic) return Status::OK();
  const SyncOptions& sync = job.trainer.sync;
  if (sync.mode != SyncOptions::Mode::kPs) {
    return Status::InvalidArgument(std::string("cluster.elastic: trainers join and leave a sync.mode ps job; sync.mode ") +
                                   ModeName(sync.mode) + " keeps a fixed group of trainers");
  }
  // BSP: each clock waits for the trainers of its step's split (wire ClockRequest.members), so
  // a join or leave takes effect at a clock boundary. Global clipping counts a fixed number of
  // pushers per dense chunk instead.
  if (sync.consistency == Consistency::kBsp && job.trainer.optimizer.clip_norm > 0) {
    return Status::InvalidArgument(
        "cluster.elastic with sync.consistency bsp: optimizer.clip_norm (global) waits for a fixed number of "
        "pushers per clock, which changes as trainers join and leave; set optimizer.clip_norm: 0 or use a fixed "
        "membership");
  }
  if (job.trainer.parallel.auto_plan) {
    return Status::InvalidArgument("cluster.elastic: parallel.auto picks a plan for a fixed number of trainers");
  }
  return Status::OK();
}

Result<JobConfig> LoadJobConfig(const std::string& path,
                                const std::vector<std::string>& overrides) {
  YAML::Node root(YAML::NodeType::Map);
  if (!path.empty()) {
    Result<YAML::Node> loaded = config::LoadYamlFile(path);
    if (!loaded.ok()) return loaded.status();
    root.reset(*loaded);
  }
  // Report every malformed --set at once, like Parse does for the file's errors.
  std::string errors;
  for (const std::string& assignment : overrides) {
    Status s = config::ApplyOverride(root, assignment);
    if (!s.ok()) errors += (errors.empty() ? "" : "\n") + s.message();
  }
  if (!errors.empty()) return Status::InvalidArgument(errors);
  Result<JobConfig> job =
      config::Parse<JobConfig>(root, path.empty() ? "(no job file)" : path, overrides);
  if (job.ok()) STRATA_RETURN_IF_ERROR(CheckReplication(*job));
  if (job.ok()) STRATA_RETURN_IF_ERROR(CheckElasticJob(*job));
  if (job.ok()) {
    const YAML::Node server = root["server"];
    const bool set = server.IsMap() && server["migrate_chunk_mb"].IsDefined();
    STRATA_RETURN_IF_ERROR(CheckMigrateChunk(*job, set));
  }
  // An `auto` section derives parallel.dp and parallel.tp from placements (auto_plan.h).
  if (job.ok() && job->trainer.auto_parallel.enabled()) {
    STRATA_RETURN_IF_ERROR(ApplyAutoPlan(job->trainer));
  }
  // The keys are read once, here, for every binary; a bad file stops it before it joins.
  if (job.ok() && job->cluster.auth == AuthMode::kCurve) {
    STRATA_ASSIGN_OR_RETURN(job->transport.curve, LoadCurveKeys(job->cluster.curve));
  }
  return job;
}

void AddJobFlags(CLI::App& app, JobFlags& flags) {
  app.add_option("--config,-c", flags.config_path, "job file (YAML); its fields are listed below")
      ->check(CLI::ExistingFile)
      ->option_text("FILE");  // not CLI11's "TEXT:FILE"
  // One value per --set, so a following positional argument is not swallowed.
  app.add_option("--set", flags.overrides,
                 "override a job field, e.g. --set cluster.servers=4; the value is YAML "
                 "(names=[a,b]); repeatable, applied in order after --config")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  app.add_flag("--print-config", flags.print_config,
               "print the effective job config (defaults, --config, --set) as YAML and exit");
  app.footer([] {
    return "Job fields (set in the --config file, or with --set KEY=VALUE):\n\n" +
           config::Describe<JobConfig>();
  });
}

Result<JobConfig> ResolveJobConfig(const JobFlags& flags) {
  return LoadJobConfig(flags.config_path, flags.overrides);
}

std::optional<int> LoadJobOrExit(const JobFlags& flags, const char* program, JobConfig* job) {
  auto resolved = ResolveJobConfig(flags);
  if (!resolved.ok()) {
    std::cerr << program << ": " << resolved.status().ToString() << "\n";
    return 2;
  }
  *job = std::move(resolved).value();
  if (flags.print_config) {
    std::cout << JobConfigToYaml(*job);
    return 0;
  }
  return std::nullopt;
}

std::string JobConfigToYaml(const JobConfig& job) {
  return YAML::Dump(config::ToYaml(job)) + "\n";
}

}  // namespace strata
