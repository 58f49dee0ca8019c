// scheduler_main.cc: strata-scheduler, the membership and rendezvous process of a cluster.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <unistd.h>  // environ

#include "cluster/scheduler.h"
#include "common/logging.h"
#include "common/transport.h"
#include "tools/job_config.h"
#include "tools/metrics_endpoint.h"
#include "tools/placement_env.h"
#include "tools/signals.h"

int main(int argc, char** argv) {
  using namespace strata;
  CLI::App app{"strata-scheduler: registers servers and trainers, publishes the cluster view, runs "
               "barriers, heartbeats and the rendezvous key-value store"};
  JobFlags flags;
  AddJobFlags(app, flags);
  std::string bind, address_file;
  app.add_option("--bind", bind,
                 "endpoint to listen on; port 0 picks a free one (default: cluster.scheduler's port on "
                 "STRATA_BIND_HOST, else cluster.scheduler)");
  app.add_option("--address-file", address_file, "write the bound address to this file once listening");
  int metrics_port = 0;
  AddMetricsPortFlag(app, &metrics_port);
  CLI11_PARSE(app, argc, argv);

  JobConfig job_config;
  JobPlacement placement;
  if (auto code = LoadPlacedJobOrExit(flags, CaptureEnvironment(environ), "strata-scheduler",
                                      &job_config, &placement)) {
    return *code;
  }
  const JobConfig* job = &job_config;
  LogOptions log = job->log;
  log.role = "scheduler";
  log.rank = 0;
  InitLogging(log);
  InstallStopSignals();

  const std::string endpoint = SchedulerBindEndpoint(bind, placement, job->cluster.scheduler);
  auto transport = MakeTransport(endpoint, job->transport);
  if (!transport.ok()) {
    spdlog::error("{}", transport.status().ToString());
    return 2;
  }
  Scheduler scheduler(SchedulerOptions{job->cluster}, std::move(transport).value());
  auto address = scheduler.Start(endpoint);
  if (!address.ok()) {
    spdlog::error("cannot listen on {}: {}", endpoint, address.status().ToString());
    return 1;
  }
  if (!address_file.empty()) {
    // Written then renamed, so a reader never sees half an address.
    const std::string tmp = address_file + ".tmp";
    std::ofstream(tmp) << *address << "\n";
    std::error_code ec;
    std::filesystem::rename(tmp, address_file, ec);
    if (ec) {
      spdlog::error("cannot write {}: {}", address_file, ec.message());
      return 1;
    }
  }
  MetricsRegistry metrics;
  MetricsEndpoint metrics_endpoint("scheduler", 0, &metrics, [&scheduler](MetricsRegistry& m) {
    using T = MetricsRegistry::Type;
    const ClusterView view = scheduler.view();
    m.Set("strata_scheduler_view_epoch", "the cluster view's epoch (bumps at every membership change)", T::kGauge,
          static_cast<double>(view.epoch));
    for (auto [role, name] : {std::pair{Role::kServer, "server"}, std::pair{Role::kTrainer, "trainer"}}) {
      m.Set("strata_scheduler_nodes", "nodes in the cluster view, by role", T::kGauge,
            static_cast<double>(view.WithRole(role).size()), MetricLabel("role", name));
    }
    m.SetHistogram("strata_scheduler_request_duration_seconds",
                   "seconds handling each request (registration, heartbeat, barrier, kv)", scheduler.request_seconds());
  });
  if (!StartMetricsIfAsked(metrics_endpoint, metrics_port, job->cluster.metrics_port, Role::kScheduler, 0, job->cluster.servers)) return 1;
  while (!scheduler.WaitDone(Millis(100))) {
    if (StopRequested()) {
      spdlog::info("signal received: telling every node to shut down");
      break;
    }
  }
  scheduler.Stop();
  spdlog::info("scheduler: done");
  return 0;
}
