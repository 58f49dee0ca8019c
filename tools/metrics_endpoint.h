// metrics_endpoint.h: MetricsEndpoint, the Prometheus /metrics endpoint of a strata process
// (cpp-httplib, on its own thread), and which port each process of a job takes
// (cluster.metrics_port; docs/metrics.md).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "cluster/cluster.h"
#include "common/metrics.h"
#include "common/status.h"

namespace httplib {
class Server;
}

namespace strata {

// The port of this process: the scheduler takes `base`, server r base + 1 + r, trainer r
// base + 1 + servers + r, so one machine's processes never collide. 0 when base is 0 (off).
int MetricsPortFor(int base, Role role, int rank, int servers);

// Serves GET /metrics from a thread until destroyed. Each scrape first calls `collect` (on the
// HTTP thread) to refresh the registry, then adds the process's own metrics (strata_up,
// resident memory, uptime). Not copyable; Start and the destructor from one thread.
class MetricsEndpoint {
 public:
  using Collect = std::function<void(MetricsRegistry&)>;
  MetricsEndpoint(std::string role, int rank, MetricsRegistry* registry, Collect collect = {});
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // Listens on host:port (all interfaces by default). Unavailable naming the port when it is taken.
  [[nodiscard]] Status Start(int port, const std::string& host = "0.0.0.0");

 private:
  std::string Scrape();

  const std::string role_;
  const int rank_;
  MetricsRegistry* registry_;
  Collect collect_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

// Starts `endpoint` on the process's port when cluster.metrics_port is set, logging where;
// returns false (after logging why) when the port cannot be had.
bool StartMetricsIfAsked(MetricsEndpoint& endpoint, int base, Role role, int rank, int servers);

}  // namespace strata
