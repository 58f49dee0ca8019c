// server_main.cc: strata-server, a parameter server: joins the cluster, holds its shard of every
// table, applies optimizers on push and enforces each table's consistency, until the scheduler
// ends the job. With server.store.kind = tiered its tables live on disk under
// <path>/server-<rank>/ and the same command (same --rank) restarted after a crash reloads them
// and rejoins.
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include <unistd.h>  // environ

#include "common/allocator.h"
#include "common/logging.h"
#include "ps/server.h"
#include "tools/job_config.h"
#include "tools/metrics_endpoint.h"
#include "tools/placement_env.h"
#include "tools/signals.h"
#include "trainer/checkpoint.h"

namespace strata {
namespace {

// The server's times (PsServer::ReadTimings) as the histograms docs/metrics.md names. Those of
// durability and saveTables appear once there is one.
void CollectServerTimings(const PsServer::Timings& t, MetricsRegistry& m) {
  const char* request_help = "a worker's seconds on a request, by op (queue wait and a parked pull's wait excluded)";
  m.SetHistogram("strata_server_request_duration_seconds", request_help, t.pull_seconds, MetricLabel("op", "pull"));
  m.SetHistogram("strata_server_request_duration_seconds", request_help, t.push_seconds, MetricLabel("op", "push"));
  if (t.save_seconds.count > 0) {
    m.SetHistogram("strata_server_request_duration_seconds", request_help, t.save_seconds, MetricLabel("op", "save_tables"));
  }
  for (const auto& [name, s] : t.tables) {
    const std::string table = MetricLabel("table", name);
    if (s.wal_sync_seconds.count > 0) {
      m.SetHistogram("strata_table_wal_sync_duration_seconds", "seconds of each synced WAL write (durability: wal)",
                     s.wal_sync_seconds, table);
    }
    if (s.checkpoint_seconds.count > 0) {
      m.SetHistogram("strata_table_checkpoint_duration_seconds", "seconds of each store checkpoint (durability: checkpoint)",
                     s.checkpoint_seconds, table);
    }
  }
}

// The server's statistics (PsServer::StatsJson) as the metrics docs/metrics.md names.
void CollectServerMetrics(const std::string& stats_json, MetricsRegistry& m) {
  using T = MetricsRegistry::Type;
  const auto j = nlohmann::json::parse(stats_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return;
  auto counter = [&](const char* name, const char* help, const char* key, double scale = 1) {
    m.Set(name, help, T::kCounter, j.value(key, 0.0) * scale);
  };
  counter("strata_server_requests_total", "requests received", "requests");
  counter("strata_server_pulls_total", "pull requests answered", "pulls");
  counter("strata_server_pushes_total", "push requests applied", "pushes");
  counter("strata_server_keys_pulled_total", "rows (or dense slices) sent by pulls", "keys_pulled");
  counter("strata_server_keys_pushed_total", "rows (or dense slices) received by pushes", "keys_pushed");
  counter("strata_server_received_bytes_total", "request bytes received", "bytes_in");
  counter("strata_server_sent_bytes_total", "reply bytes sent", "bytes_out");
  counter("strata_server_apply_seconds_total", "seconds spent applying pushes (optimizer updates)", "apply_ms", 1e-3);
  counter("strata_server_errors_total", "requests answered with an error", "errors");
  m.Set("strata_server_queue_depth", "requests waiting for a worker", T::kGauge, j.value("queue_depth", 0.0));
  m.Set("strata_server_parked_pulls", "pulls waiting for their clock (bsp, ssp)", T::kGauge, j.value("parked_pulls", 0.0));
  counter("strata_server_parked_refused_total",
          "pulls refused because their peer had server.max_parked_per_peer (or _mb_) parked already", "parked_refused");
  if (!j.contains("tables") || !j["tables"].is_array()) return;
  m.Set("strata_server_tables", "tables this server holds a shard of", T::kGauge, static_cast<double>(j["tables"].size()));
  for (const auto& t : j["tables"]) {
    const std::string table = MetricLabel("table", t.value("name", std::string()));
    m.Set("strata_table_rows", "records of the table's shard, all tiers", T::kGauge, t.value("records", 0.0), table);
    m.Set("strata_table_dram_bytes", "bytes of the table's shard resident in DRAM", T::kGauge,
          t.value("bytes_in_memory", 0.0), table);
    m.Set("strata_table_hits_total", "lookups served from DRAM", T::kCounter, t.value("hits", 0.0), table);
    m.Set("strata_table_misses_total", "lookups that went to a lower tier or created a row", T::kCounter,
          t.value("misses", 0.0), table);
  }
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  using namespace strata;
  TuneHostMallocForLargeBuffers();  // before any thread starts
  CLI::App app{"strata-server: a parameter server holding a shard of every table"};
  JobFlags flags;
  AddJobFlags(app, flags);
  NodeFlags node_flags;
  AddNodeFlags(app, node_flags);  // --rank (a tiered store needs one), --bind, --advertise
  int workers = 0, stats_interval_ms = 0;
  auto* workers_flag =
      app.add_option("--workers", workers, "threads applying pushes (overrides server.workers)")
          ->check(CLI::Range(1, 256));
  auto* stats_flag =
      app.add_option("--stats-interval-ms", stats_interval_ms,
                     "log statistics this often, 0: never (overrides server.stats_interval_ms)")
          ->check(CLI::Range(0, 86400000));
  int metrics_port = 0;
  AddMetricsPortFlag(app, &metrics_port);
  CLI11_PARSE(app, argc, argv);

  JobConfig job;
  JobPlacement placement;
  if (auto code = LoadPlacedJobOrExit(flags, CaptureEnvironment(environ), "strata-server", &job,
                                      &placement)) {
    return *code;
  }
  NodeOptions node_options;
  if (Status s = PlaceNode(node_flags, placement, Role::kServer, &node_options); !s.ok()) {
    std::cerr << "strata-server: " << s.ToString() << "\n";
    return 2;
  }
  node_options.cluster = job.cluster;
  node_options.transport = job.transport;
  LogOptions log = job.log;
  log.role = "server";
  InitLogging(log);
  InstallStopSignals();

  ServerOptions& server_options = job.server;
  if (workers_flag->count()) server_options.workers = workers;
  if (stats_flag->count()) server_options.stats_interval_ms = stats_interval_ms;
  // Inference from a ps or hybrid checkpoint: the tables are loaded from it into DRAM (whatever
  // server.store says) and served read-only; nothing is recorded or restored.
  const bool serve = ServersServeCheckpoint(job.trainer);
  std::string checkpoint;
  if (serve) {
    if (node_options.requested_rank < 0) {
      std::cerr << "strata-server: serving infer.checkpoint needs --rank (or STRATA_RANK): the rank picks the keys\n";
      return 2;
    }
    auto resolved = ResolveCheckpoint(job.trainer.infer.checkpoint);
    if (!resolved.ok()) {
      spdlog::error("infer.checkpoint: {}", resolved.status().ToString());
      return 1;
    }
    checkpoint = *resolved;
  }
  const ServerStoreOptions& store = server_options.store;
  const bool replicated = server_options.replication != Replication::kNone;
  if (node_options.join && (serve || store.kind == StoreKind::kTiered)) {
    // A joining server learns its rank when it joins; a tiered store's directory (and a served
    // checkpoint's keys) need it before.
    std::cerr << "strata-server: --join takes the next rank when it joins, and "
              << (serve ? "serving infer.checkpoint" : "server.store.kind: tiered") << " needs the rank before: use "
              << (serve ? "--rank" : "server.store.kind: memory for a joining server") << "\n";
    return 2;
  }
  std::string dir;
  if (store.kind == StoreKind::kTiered && !serve) {
    // The directory is this server's identity across restarts, so the rank must be fixed.
    if (node_options.requested_rank < 0) {
      std::cerr << "strata-server: server.store.kind: tiered needs --rank (or STRATA_RANK)\n";
      return 2;
    }
    dir = store.path + "/server-" + std::to_string(node_options.requested_rank);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      std::cerr << "strata-server: cannot create " << dir << ": " << ec.message() << "\n";
      return 1;
    }
    server_options.tables_file = dir + "/tables";
  }

  Node node(node_options);
  node.OnEvent([](const NodeEvent& e) {
    if (e.kind == NodeEvent::Kind::kDead) spdlog::warn("event: dead {}", e.node.Describe());
  });
  // Tiered: <dir>/table-<id>, and the replication copy's at <dir>/backup-of-<shard>/table-<id>.
  PsServer server(node, server_options,
                  serve || store.kind == StoreKind::kMemory ? ServerStores{} : TieredStores(store, dir));
  // Declared dead while it ran (stalled past cluster.heartbeat_timeout_ms): it steps down and
  // registers again at its rank; with replication it then takes its shards back as copies.
  node.OnDeclaredDead([&server] { server.StepDown(); }, [&server] { server.CameBack(); });
  // Every way out of main stops the heartbeats (and so those calls) before `server` goes.
  struct StopHeartbeats {
    Node& node;
    ~StopHeartbeats() { node.StopWithoutLeaving(); }
  } stop_heartbeats{node};
  // /metrics and /healthz: started before loading and registering when the port is known by
  // then (--metrics-port, or a fixed rank), so a readiness probe sees 503 until this server
  // serves; else once joined.
  MetricsRegistry metrics;
  const int known_rank = node_options.requested_rank;
  MetricsEndpoint metrics_endpoint("server", known_rank, &metrics,
                                   [&server](MetricsRegistry& m) {
                                     CollectServerMetrics(server.StatsJson(), m);
                                     CollectServerTimings(server.ReadTimings(), m);
                                   });
  auto start_metrics = [&](int rank) {
    return StartMetricsIfAsked(metrics_endpoint, metrics_port, job.cluster.metrics_port, Role::kServer, rank,
                               job.cluster.servers);
  };
  const bool early_metrics = metrics_port > 0 || (job.cluster.metrics_port > 0 && known_rank >= 0);
  if (early_metrics) {
    metrics_endpoint.SetReady(false, serve ? "loading " + checkpoint : "loading tables");
    if (!start_metrics(known_rank)) return 1;
  }
  // Before Join: the first request after a restart already sees every reloaded table, and a
  // checkpoint that does not load whole is never served.
  Status loaded = serve ? server.LoadCheckpoint(checkpoint, static_cast<uint32_t>(node_options.requested_rank),
                                                static_cast<uint32_t>(job.cluster.servers))
                        : server.RestoreTables();
  if (!loaded.ok()) {
    spdlog::error("{}", loaded.ToString());
    return 1;
  }
  metrics_endpoint.SetReady(false, "registering with the scheduler at " + job.cluster.scheduler);
  if (node_options.join) server.ExpectTakeOver();  // serves nothing until it holds its keys
  if (Status s = node.Join(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return 1;
  }
  SetLogIdentity("server", node.rank());
  if (node_options.join) {
    if (Status s = server.TakeOver(Millis(job.trainer.sync.timeout_ms)); !s.ok()) {
      spdlog::error("{}", s.ToString());
      return 1;
    }
  }
  server.Joined();  // with replication, a restarted server asks for copies of its shards
  if (serve && (node.rank() != node_options.requested_rank ||
                static_cast<int>(node.view().Count(Role::kServer)) != job.cluster.servers)) {
    spdlog::error("serving {}: loaded the keys of server {} of {}, but joined as server {} of {}", checkpoint,
                  node_options.requested_rank, job.cluster.servers, node.rank(), node.view().Count(Role::kServer));
    return 1;
  }
  metrics_endpoint.SetReady(true);
  if (!early_metrics) {
    metrics_endpoint.set_rank(node.rank());  // the rank came from the scheduler: the port only now
    if (!start_metrics(node.rank())) return 1;
  }
  int code = 0;
  while (!node.WaitForShutdown(Millis(100))) {
    if (StopRequested()) break;
    if (Status s = node.SchedulerStatus(); !s.ok()) {
      spdlog::error("{}", s.ToString());
      code = 1;
      break;
    }
  }
  // SIGTERM on a replicated server while its job runs: it stops without deregistering, as if it
  // had died, so that its backup takes its shard over (a clean leave is no death: nobody would
  // serve the shard). A server that joined an elastic job later leaves it instead, handing its
  // keys back (the ring of backups follows, ps/replication.h).
  const bool joined_later = node.rank() >= job.cluster.servers;
  if (StopRequested() && replicated && !(job.cluster.elastic && joined_later) && !node.WaitForShutdown(Millis(0)) &&
      node.SchedulerStatus().ok()) {
    spdlog::info("final stats: {}", server.StatsLine());
    spdlog::info("stopping without leaving the running job: with server.replication: backup, this server's backup "
                 "takes its shard over once the scheduler declares it dead");
    node.StopWithoutLeaving();
    return 0;
  }
  // SIGTERM on a server of an elastic job: it leaves the running job, handing its keys over
  // (PsServer::HandOver), unless the job is ending. One that cannot (server 0, dense chunks here,
  // a join under way...) stops without deregistering, as if it had died: a clean leave would
  // tell the trainers its keys live elsewhere.
  if (StopRequested() && job.cluster.elastic && !node.WaitForShutdown(Millis(0)) && node.SchedulerStatus().ok()) {
    Status s = server.HandOver(Millis(job.transport.request_timeout_ms));
    if (server.handed_over()) {
      spdlog::info("final stats: {}", server.StatsLine());
      if (!s.ok()) {
        spdlog::error("{}", s.ToString());
        return 1;
      }
      spdlog::info("left the job: its keys live on the other servers");
      return 0;
    }
    spdlog::error("{}; stopping without leaving (the scheduler will declare this server dead)", s.ToString());
    spdlog::info("final stats: {}", server.StatsLine());
    node.StopWithoutLeaving();
    return 1;
  }
  spdlog::info("final stats: {}", server.StatsLine());
  const std::optional<Millis> leave_timeout =
      StopRequested() || !node.SchedulerStatus().ok() ? std::optional<Millis>(Millis(1000)) : std::nullopt;
  if (Status s = node.Leave(leave_timeout); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return 1;
  }
  return code;
}
