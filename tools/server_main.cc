// server_main.cc: strata-server, a parameter server: joins the cluster, holds its shard of every
// table, applies optimizers on push and enforces each table's consistency, until the scheduler
// ends the job.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <iostream>

#include "common/logging.h"
#include "ps/server.h"
#include "tools/job_config.h"
#include "tools/signals.h"

int main(int argc, char** argv) {
  using namespace strata;
  CLI::App app{"strata-server: a parameter server holding a shard of every table"};
  JobFlags flags;
  AddJobFlags(app, flags);
  NodeOptions node_options;
  ServerOptions server_options;
  node_options.role = Role::kServer;
  app.add_option("--rank", node_options.requested_rank, "server rank to ask for (-1: assigned)");
  app.add_option("--bind", node_options.bind, "endpoint to listen on; port 0 picks a free one");
  app.add_option("--workers", server_options.worker_threads, "threads applying pushes")
      ->check(CLI::Range(1, 256));
  app.add_option("--stats-interval-ms", server_options.stats_log_interval_ms,
                 "log statistics this often (0: never)")->check(CLI::Range(0, 86400000));
  CLI11_PARSE(app, argc, argv);

  JobConfig job_config;
  if (auto code = LoadJobOrExit(flags, "strata-server", &job_config)) return *code;
  const JobConfig* job = &job_config;
  node_options.cluster = job->cluster;
  node_options.transport = job->transport;
  LogOptions log = job->log;
  log.role = "server";
  InitLogging(log);
  InstallStopSignals();

  Node node(node_options);
  node.OnEvent([](const NodeEvent& e) {
    if (e.kind == NodeEvent::Kind::kDead) spdlog::warn("event: dead {}", e.node.Describe());
  });
  PsServer server(node, server_options);
  if (Status s = node.Join(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return 1;
  }
  SetLogIdentity("server", node.rank());
  while (!node.WaitForShutdown(Millis(100))) {
    if (StopRequested()) break;
  }
  spdlog::info("final stats: {}", server.StatsJson());
  if (Status s = node.Leave(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return 1;
  }
  return 0;
}
