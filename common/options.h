// options.h: the option structs of the common layer (cluster membership, transport, faults),
// plain copyable values with documented defaults. config.h binds them to YAML job files.
#pragma once

#include <cstdint>
#include <string>

#include "common/curve.h"

namespace strata {

namespace config {
class Binder;
}

enum class AuthMode { kNone, kCurve };

// Who is in the cluster and how membership is watched. The scheduler waits for exactly
// `servers` + `trainers` nodes before it publishes the cluster view.
struct ClusterOptions {
  // The scheduler's address. tcp://host:port between machines; ipc:///path on one machine.
  std::string scheduler = "tcp://127.0.0.1:7000";
  int servers = 1;   // number of strata-server processes
  int trainers = 1;  // number of strata-trainer processes
  // Each node sends a heartbeat this often. Lower detects failures sooner at more traffic.
  int heartbeat_interval_ms = 500;
  // A node silent for this long is declared dead and every node is told. Must exceed the
  // interval by a margin that covers scheduling hiccups (default: 10 missed heartbeats).
  int heartbeat_timeout_ms = 5000;
  // How long a node waits for the whole cluster to register before giving up.
  int join_timeout_ms = 60000;
  // How long a node keeps trying to open a TCP connection to the scheduler before joining
  // fails naming its host and port. Covers a scheduler started a little after its nodes (one
  // srun, one indexed job); shorter fails a wrong address sooner.
  int connect_timeout_ms = 30000;
  // A node whose heartbeats have had no answer for this long has lost the scheduler:
  // Node::SchedulerStatus says so, and strata-trainer and strata-server exit with that error
  // (0: never; they go on and retry). Longer than a scheduler's restart.
  int scheduler_timeout_ms = 60000;
  // Prometheus /metrics (docs/metrics.md): the scheduler listens on this port, server r on
  // port + 1 + r, trainer r on port + 1 + servers + r. 0 (the default): no endpoint.
  int metrics_port = 0;
  // Elastic membership (docs/reliability.md, "Elastic membership"): trainers may join
  // (strata-trainer --join) or leave a running ps job under ASP or SSP, and servers may join
  // (strata-server --join). Trainers then lease the data split of their steps from the
  // scheduler (one call every few steps). false (the default): the membership is fixed at
  // start and a --join is refused.
  bool elastic = false;
  // none: anyone who can reach a port may join, push, pull and read the kv store. curve: every
  // ZeroMQ socket of every role uses CURVE (encrypted, and only clients whose key is in
  // curve.authorized_keys are accepted; docs/security.md). The files are read at start into
  // TransportOptions::curve.
  AuthMode auth = AuthMode::kNone;
  CurveFiles curve;
};

// Fault injection: a knob, not a fork (ps-lite's PS_DROP_MSG). Applies to messages this
// process sends. All zero (the default) disables it and costs nothing.
struct FaultOptions {
  double drop_rate = 0.0;   // probability that an outgoing message is silently dropped
  double delay_rate = 0.0;  // probability that an outgoing message is held back...
  int delay_ms = 0;         // ...for this long
  uint64_t seed = 1;        // makes the drop/delay pattern reproducible
  bool enabled() const { return drop_rate > 0.0 || (delay_rate > 0.0 && delay_ms > 0); }
};

struct TransportOptions {
  // Default timeout of a request that names none. Every wait has a timeout.
  int request_timeout_ms = 30000;
  // ZeroMQ high-water marks (messages queued per socket before sends block or drop).
  int send_hwm = 10000;
  int recv_hwm = 10000;
  // Number of ZeroMQ I/O threads (one moves ~1 GB/s; raise for many fast links).
  int io_threads = 1;
  // On shutdown, how long queued messages (a last reply, say) may take to leave before they
  // are dropped. Bounds how long a shutdown can wait on a dead peer.
  int linger_ms = 500;
  // Small messages under load leave in larger batches (interrupt moderation): once a wake-up
  // of a transport's I/O thread found a stream queued (16 or more small messages for one
  // peer), it takes the queue at most once per this many microseconds until the stream ends,
  // so the per-batch costs (wake-ups, polls, ZeroMQ's signals between its threads) are paid
  // per hundreds of messages instead of tens. A message with nothing queued before it, a call
  // and its reply, leaves at once. Adds at most this much to a message's time in a stream;
  // 0: every wake-up takes the queue at once.
  int coalesce_us = 50;
  // The largest frame (one part of a message) any socket accepts, in MiB: a peer sending a
  // larger one is disconnected by ZeroMQ (ZMQ_MAXMSGSIZE) as soon as its header arrives, before
  // anything is buffered, so a hostile peer cannot make a process allocate more than this per
  // connection. Sending a larger frame fails at once naming this field. The largest legal
  // frames are a dense chunk (the table's chunk_floats x 4 bytes, 2 MiB by default) and a
  // sparse push's gradients to one server (its keys x dim x 4 bytes); every process of a job
  // must agree (they read the same job file).
  int max_message_mb = 256;
  // The most connections one host (by IP address) may hold open to a process's bound socket;
  // a handshake past it is refused and ZeroMQ closes that connection (common/connection_limit.h).
  // A legitimate host opens one per process on it; 0: no bound.
  int max_connections_per_host = 256;
  FaultOptions fault;
  // Not in the job file: the keys of cluster.curve, read at start (LoadJobConfig) when
  // cluster.auth is curve. Empty: no CURVE.
  CurveKeys curve;
};

void Bind(config::Binder& b, CurveFiles& o);
void Bind(config::Binder& b, ClusterOptions& o);
void Bind(config::Binder& b, FaultOptions& o);
void Bind(config::Binder& b, TransportOptions& o);

}  // namespace strata
