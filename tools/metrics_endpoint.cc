// metrics_endpoint.cc: MetricsEndpoint, MetricsPortFor, the --metrics-port flag.
#include "tools/metrics_endpoint.h"

#include <httplib.h>
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <fstream>

namespace strata {

int MetricsPortFor(int base, Role role, int rank, int servers) {
  if (base <= 0) return 0;
  switch (role) {
    case Role::kScheduler:
      return base;
    case Role::kServer:
      return base + 1 + rank;
    default:
      return base + 1 + servers + rank;
  }
}

void AddMetricsPortFlag(CLI::App& app, int* port) {
  app.add_option("--metrics-port", *port,
                 "serve /metrics, /healthz and /livez on exactly this port (beats cluster.metrics_port's "
                 "per-role offsets; 0: as cluster.metrics_port says)")
      ->check(CLI::Range(0, 65535));
}

int ProcessMetricsPort(int port_flag, int base, Role role, int rank, int servers) {
  return port_flag > 0 ? port_flag : MetricsPortFor(base, role, rank, servers);
}

MetricsEndpoint::MetricsEndpoint(std::string role, int rank, MetricsRegistry* registry, Collect collect)
    : role_(std::move(role)), rank_(rank), registry_(registry), collect_(std::move(collect)) {}

MetricsEndpoint::~MetricsEndpoint() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string MetricsEndpoint::Scrape() {
  using T = MetricsRegistry::Type;
  if (collect_) collect_(*registry_);
  const std::string who = MetricLabel("role", role_) + "," + MetricLabel("rank", std::to_string(rank_));
  registry_->Set("strata_up", "1 while the process serves metrics", T::kGauge, 1, who);
  registry_->Set("strata_process_uptime_seconds", "seconds since the endpoint started", T::kGauge,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  long pages = 0, resident = 0;
  std::ifstream statm("/proc/self/statm");
  if (statm >> pages >> resident) {
    registry_->Set("strata_process_resident_bytes", "resident set size", T::kGauge,
                   static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)));
  }
  return registry_->Text();
}

void MetricsEndpoint::SetReady(bool ready, std::string why) {
  std::lock_guard lock(ready_mu_);
  ready_ = ready;
  not_ready_why_ = std::move(why);
}

std::pair<int, std::string> MetricsEndpoint::Health() const {
  std::lock_guard lock(ready_mu_);
  if (ready_) return {200, "ok\n"};
  return {503, "not ready: " + (not_ready_why_.empty() ? std::string("starting") : not_ready_why_) + "\n"};
}

Status MetricsEndpoint::Start(int port, const std::string& host) {
  if (server_) return Status::FailedPrecondition("the metrics endpoint is already started");
  server_ = std::make_unique<httplib::Server>();
  // httplib's default adds SO_REUSEPORT, with which a second process binds a taken port
  // silently and the two share the scrapes; SO_REUSEADDR alone still allows a quick restart.
  server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(Scrape(), "text/plain; version=0.0.4; charset=utf-8");
  });
  // Cheap: no scrape, no lock but the flag's.
  server_->Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    auto [status, body] = Health();
    res.status = status;
    res.set_content(body, "text/plain; charset=utf-8");
  });
  server_->Get("/livez", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("alive\n", "text/plain; charset=utf-8");
  });
  port_ = port == 0 ? server_->bind_to_any_port(host.c_str()) : (server_->bind_to_port(host.c_str(), port) ? port : -1);
  if (port_ <= 0) {
    server_.reset();
    port_ = 0;
    return Status::Unavailable("cannot listen on " + host + ":" + std::to_string(port) +
                               " for /metrics (cluster.metrics_port or --metrics-port); is the port taken?");
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // stop() only reaches a server that is running: wait for it, so the destructor cannot hang.
  for (int i = 0; i < 500 && !server_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return Status::OK();
}

bool StartMetricsIfAsked(MetricsEndpoint& endpoint, int port_flag, int base, Role role, int rank, int servers) {
  const int port = ProcessMetricsPort(port_flag, base, role, rank, servers);
  if (port == 0) return true;
  if (Status s = endpoint.Start(port); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return false;
  }
  spdlog::info("metrics: http://0.0.0.0:{}/metrics", port);
  return true;
}

}  // namespace strata
