// options.cc: the job-file schema of the common layer's option structs (and of LogOptions):
// names, docs and the limits outside which a job must not start.
#include "common/options.h"

#include "common/config.h"
#include "common/logging.h"

namespace strata {
namespace {

// Generous upper bounds: they catch unit slips (seconds written as minutes of ms, an extra
// zero) while leaving every sane setting open.
constexpr int kMaxMs = 24 * 3600 * 1000;  // one day
constexpr int kMaxNodes = 65536;

}  // namespace

void Bind(config::Binder& b, ClusterOptions& o) {
  b.Field("scheduler", o.scheduler,
          "address of the scheduler: tcp://host:port between machines, ipc:///path on one")
      .Check(config::IsEndpoint, "an endpoint like tcp://host:port or ipc:///path");
  b.Field("servers", o.servers, "number of strata-server processes").Range(0, 4096);
  b.Field("trainers", o.trainers, "number of strata-trainer processes").Range(0, kMaxNodes);
  b.Field("heartbeat_interval_ms", o.heartbeat_interval_ms,
          "each node sends a heartbeat this often; lower detects failures sooner at more traffic")
      .Range(1, 3600 * 1000);
  b.Field("heartbeat_timeout_ms", o.heartbeat_timeout_ms,
          "a node silent this long is declared dead; leave a margin of several intervals for "
          "scheduling hiccups")
      .Range(1, kMaxMs);
  b.Field("join_timeout_ms", o.join_timeout_ms,
          "how long a node waits for the whole cluster to register before giving up")
      .Range(1, kMaxMs);
  b.Field("connect_timeout_ms", o.connect_timeout_ms,
          "how long a node retries reaching the scheduler's host and port before failing with "
          "an error naming them (covers a scheduler that starts after its nodes)")
      .Range(1, kMaxMs);
  b.Field("scheduler_timeout_ms", o.scheduler_timeout_ms,
          "a node whose heartbeats got no answer this long exits with an error naming the scheduler "
          "(0: never)")
      .Range(0, kMaxMs);
  b.Field("metrics_port", o.metrics_port,
          "Prometheus /metrics: the scheduler's port; server r takes port+1+r, trainer r "
          "port+1+servers+r (docs/metrics.md); 0: off")
      .Range(0, 65535);
  b.Field("elastic", o.elastic,
          "trainers (ps mode) and servers (asp, ssp) may join a running job with --join, and leave it on "
          "SIGTERM; trainers lease their data split from the scheduler, and a bsp clock waits for the "
          "trainers of its step's split (docs/reliability.md)");
  b.Enum("auth", o.auth, {{"none", AuthMode::kNone}, {"curve", AuthMode::kCurve}},
         "none: anyone who reaches a port may join; curve: ZeroMQ CURVE on every socket, only "
         "keys in curve.authorized_keys may connect (docs/security.md)");
  b.Section("curve", o.curve, "key files of auth: curve (strata-node keygen DIR writes them)");
  std::string missing;
  for (const auto& [name, path] : {std::pair<const char*, const std::string&>{"server_key", o.curve.server_key},
                                   {"client_key", o.curve.client_key},
                                   {"authorized_keys", o.curve.authorized_keys}}) {
    if (path.empty()) missing += std::string(missing.empty() ? "" : ", ") + "curve." + name;
  }
  b.Require(o.auth != AuthMode::kCurve || missing.empty(), "auth",
            "curve needs key files (strata-node keygen DIR writes them); missing: " + missing);
  // A timeout at or below the interval would declare healthy nodes dead between two beats.
  b.Require(o.heartbeat_timeout_ms > o.heartbeat_interval_ms, "heartbeat_timeout_ms",
            "must exceed heartbeat_interval_ms");
  b.Require(o.servers + o.trainers > 0, "trainers", "servers + trainers must be at least 1");
}

void Bind(config::Binder& b, CurveFiles& o) {
  b.Field("server_key", o.server_key,
          "keypair file every member's bound sockets serve with (held by every member of the job)");
  b.Field("client_key", o.client_key,
          "this process's keypair file, presented on every connection it opens (its public key "
          "must be in authorized_keys)");
  b.Field("authorized_keys", o.authorized_keys, "file of the client public keys allowed to connect");
}

void Bind(config::Binder& b, FaultOptions& o) {
  b.Field("drop_rate", o.drop_rate, "probability that an outgoing message is silently dropped")
      .Range(0.0, 1.0);
  b.Field("delay_rate", o.delay_rate, "probability that an outgoing message is held back")
      .Range(0.0, 1.0);
  b.Field("delay_ms", o.delay_ms, "how long a delayed message is held back").Range(0, 600 * 1000);
  b.Field("seed", o.seed, "seed of the drop/delay pattern, which makes it reproducible");
}

void Bind(config::Binder& b, TransportOptions& o) {
  b.Field("request_timeout_ms", o.request_timeout_ms,
          "timeout of a request that names none (every wait has a timeout)")
      .Range(1, kMaxMs);
  // ZeroMQ reads a high-water mark of 0 as "no limit", which is a legitimate choice.
  b.Field("send_hwm", o.send_hwm, "messages queued per socket before sends block (0: no limit)")
      .Range(0, 100'000'000);
  b.Field("recv_hwm", o.recv_hwm, "messages queued per socket before receives drop (0: no limit)")
      .Range(0, 100'000'000);
  b.Field("io_threads", o.io_threads, "ZeroMQ I/O threads (one moves about 1 GB/s)").Range(1, 64);
  b.Field("linger_ms", o.linger_ms, "on shutdown, how long queued messages may take to leave")
      .Range(0, 60000);
  b.Field("coalesce_us", o.coalesce_us,
          "under a stream of small messages, the I/O thread takes the queue at most once per this many "
          "microseconds, so they leave in larger batches (0: at once; a lone message never waits)")
      .Range(0, 10000);
  b.Field("max_message_mb", o.max_message_mb,
          "largest frame (message part) a socket accepts, MiB: a peer sending more is disconnected before "
          "it is buffered, sending more fails at once; above a dense chunk and a sparse push's gradients")
      .Range(1, 1 << 20);
  b.Field("max_connections_per_host", o.max_connections_per_host,
          "most connections one host (IP address) may hold open to a process's port; past it a handshake "
          "is refused and the connection closed (0: no bound; a member opens one per process)")
      .Range(0, 1 << 20);
  b.Section("fault", o.fault, "fault injection on messages this process sends (off by default)");
}

// role and rank are not configuration: main() and the scheduler set them.
void Bind(config::Binder& b, LogOptions& o) {
  b.Field("level", o.level, "log level")
      .Check(IsValidLogLevel, "a log level: trace, debug, info, warn, error, critical or off");
}

}  // namespace strata
