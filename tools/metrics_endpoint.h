// metrics_endpoint.h: MetricsEndpoint, the HTTP endpoint of a strata process (cpp-httplib, on
// its own thread): Prometheus /metrics, and /healthz and /livez for probes (Kubernetes); and
// which port each process of a job takes (cluster.metrics_port, --metrics-port; docs/metrics.md).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cluster/cluster.h"
#include "common/metrics.h"
#include "common/status.h"

namespace httplib {
class Server;
}
namespace CLI {
class App;
}

namespace strata {

// The port of this process: the scheduler takes `base`, server r base + 1 + r, trainer r
// base + 1 + servers + r, so one machine's processes never collide. 0 when base is 0 (off).
int MetricsPortFor(int base, Role role, int rank, int servers);

// --metrics-port: this process's port exactly, beating cluster.metrics_port's per-role offsets
// (in Kubernetes every pod has its own address, so every process takes the same port and the
// probes name it). Stores 0 (not given) in *port unless given.
void AddMetricsPortFlag(CLI::App& app, int* port);

// Serves from a thread until destroyed:
//   GET /metrics  each scrape first calls `collect` (on the HTTP thread) to refresh the
//                 registry, then adds the process's own metrics (strata_up, resident memory,
//                 uptime).
//   GET /healthz  200 "ok" while the process is serving (SetReady), else 503 with the reason
//                 ("loading tables", "registering with the scheduler"): a readiness probe.
//   GET /livez    200 while the HTTP thread answers: a liveness probe that a long load does
//                 not fail.
// Not copyable; Start and the destructor from one thread; SetReady from any thread.
class MetricsEndpoint {
 public:
  using Collect = std::function<void(MetricsRegistry&)>;
  MetricsEndpoint(std::string role, int rank, MetricsRegistry* registry, Collect collect = {});
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // Listens on host:port (all interfaces by default; port 0: any free one, see port()).
  // Unavailable naming the port when it is taken.
  [[nodiscard]] Status Start(int port, const std::string& host = "0.0.0.0");
  int port() const { return port_; }
  // The rank label of strata_up; before Start (a server learns its rank when it joins).
  void set_rank(int rank) { rank_ = rank; }

  // Ready (the default) or not, and why not (the 503's body). A process that starts its
  // endpoint before it serves (a server loading its tables) sets false first.
  void SetReady(bool ready, std::string why = "");

 private:
  std::string Scrape();
  // 200 and "ok", or 503 and the reason.
  std::pair<int, std::string> Health() const;

  const std::string role_;
  int rank_;
  MetricsRegistry* registry_;
  Collect collect_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  mutable std::mutex ready_mu_;
  bool ready_ = true;
  std::string not_ready_why_;
  int port_ = 0;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

// The port of this process: `port_flag` (--metrics-port) when > 0, else MetricsPortFor.
int ProcessMetricsPort(int port_flag, int base, Role role, int rank, int servers);

// Starts `endpoint` on ProcessMetricsPort(...) when it is not 0, logging where; returns false
// (after logging why) when the port cannot be had.
bool StartMetricsIfAsked(MetricsEndpoint& endpoint, int port_flag, int base, Role role, int rank, int servers);

}  // namespace strata
