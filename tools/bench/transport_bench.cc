// transport_bench.cc: `strata-bench transport`: round-trip latency (p50, p99) and one-way
// throughput of RpcEndpoint over ZmqTransport, beside raw ZeroMQ (REQ/REP ping-pong, PUSH/PULL
// stream) measured in the same run, between this process and a forked server (echo_server.h);
// and, on one thread, the codec's own cost per message and a small message's send and receive
// paths above ZeroMQ (message_path.h), beside a copy of the same bytes.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <thread>
#include <zmq.hpp>

#include "common/rpc.h"
#include "common/transport.h"
#include "common/zmq_transport.h"
#include "tools/bench/bench.h"
#include "tools/bench/echo_server.h"
#include "tools/bench/message_path.h"

namespace strata::bench {
namespace {

struct Options {
  int iters = 1000;       // timed round trips per size and repetition
  int reps = 5;           // repetitions; latency pools them, throughput takes their median
  uint64_t messages = 0;  // messages per one-way stream; 0: about 2 GiB (256..200000)
  std::string sizes = "64,4KiB,1MiB";
  std::string transports = "tcp,ipc";
  std::string peers = "ours,raw";  // one alone is for profiling
  int timeout_ms = 30000;          // for every wait on the server
  int coalesce_us = TransportOptions{}.coalesce_us;  // ours, both processes
  bool pin = false;  // this process on one CPU, the server on the others
};

constexpr uint64_t kStreamBytes = 2ull << 30;
constexpr uint64_t kMinStreamMessages = 256;
constexpr uint64_t kMaxStreamMessages = 200000;

uint64_t StreamMessages(const Options& o, uint64_t size) {
  if (o.messages) return o.messages;
  return std::clamp<uint64_t>(kStreamBytes / std::max<uint64_t>(size, 1), kMinStreamMessages,
                              kMaxStreamMessages);
}

// ---------------------------------------------------------------------------------------------
// Clients: the same two measurements, ours and raw.

class EchoClient {
 public:
  virtual ~EchoClient() = default;
  // Times `n` echo round trips of `payload`, appending microseconds to `micros`.
  virtual Status RoundTrips(const Buffer& payload, int n, std::vector<double>* micros) = 0;
  // Sends `messages` one-way copies of `payload`; returns the seconds from the first send until
  // the server confirmed it had them all.
  virtual Result<double> Stream(const Buffer& payload, uint64_t messages) = 0;
};

Message EchoMessage(const Buffer* payload) {
  Message m;
  m.set_op(Op::ECHO);
  if (payload) m.AddBytes(*payload);
  return m;
}

class OurClient final : public EchoClient {
 public:
  static Result<std::unique_ptr<OurClient>> Connect(const EchoServerAddresses& a,
                                                    const TransportOptions& options, Millis timeout) {
    STRATA_ASSIGN_OR_RETURN(auto transport, MakeTransport(a.ours, options));
    auto client = std::unique_ptr<OurClient>(new OurClient(std::move(transport), timeout));
    STRATA_ASSIGN_OR_RETURN(client->peer_, client->rpc_.Connect(a.ours));
    return client;
  }

  Status RoundTrips(const Buffer& payload, int n, std::vector<double>* micros) override {
    for (int i = 0; i < n; ++i) {
      Stopwatch watch;
      auto reply = rpc_.CallAndWait(peer_, EchoMessage(&payload), timeout_);
      const double us = watch.Micros();
      if (!reply.ok()) return reply.status().WithContext("echo");
      if (reply->num_payloads() != 1 || reply->payload(0).size() != payload.size()) {
        return Status::Internal("echo reply does not carry the payload back");
      }
      micros->push_back(us);
    }
    return Status::OK();
  }

  Result<double> Stream(const Buffer& payload, uint64_t messages) override {
    Stopwatch watch;
    for (uint64_t i = 0; i < messages; ++i) {
      STRATA_RETURN_IF_ERROR(rpc_.Notify(peer_, EchoMessage(&payload)));
    }
    auto reply = rpc_.CallAndWait(peer_, EchoMessage(nullptr), timeout_);
    const double seconds = watch.Seconds();
    if (!reply.ok()) return reply.status().WithContext("end of stream");
    return CheckCount(*reply, messages, seconds);
  }

 private:
  OurClient(std::unique_ptr<Transport> transport, Millis timeout)
      : rpc_(std::move(transport)), timeout_(timeout) {}

  static Result<double> CheckCount(const Message& reply, uint64_t sent, double seconds) {
    int64_t got = -1;
    if (reply.num_payloads() == 1 && reply.payload(0).size() == sizeof(got)) {
      std::memcpy(&got, reply.payload(0).data(), sizeof(got));
    }
    if (got != static_cast<int64_t>(sent)) {
      return Status::Internal("the server received " + std::to_string(got) + " of " +
                              std::to_string(sent) + " one-way messages");
    }
    return seconds;
  }

  RpcEndpoint rpc_;
  PeerId peer_ = kNoPeer;
  Millis timeout_;
};

class RawClient final : public EchoClient {
 public:
  // Throws zmq::error_t.
  RawClient(zmq::context_t& context, const EchoServerAddresses& a, Millis timeout)
      : push_(context, zmq::socket_type::push),
        req_(context, zmq::socket_type::req),
        ctl_(context, zmq::socket_type::req) {
    for (zmq::socket_t* s : {&push_, &req_, &ctl_}) {
      s->set(zmq::sockopt::linger, 0);
      s->set(zmq::sockopt::sndtimeo, static_cast<int>(timeout.count()));
      s->set(zmq::sockopt::rcvtimeo, static_cast<int>(timeout.count()));
    }
    push_.connect(a.pull);
    req_.connect(a.rep);
    ctl_.connect(a.ctl);
  }

  Status RoundTrips(const Buffer& payload, int n, std::vector<double>* micros) override {
    zmq::message_t reply;
    try {
      for (int i = 0; i < n; ++i) {
        Stopwatch watch;
        if (!req_.send(Constant(payload), zmq::send_flags::none) ||
            !req_.recv(reply, zmq::recv_flags::none)) {
          return Status::DeadlineExceeded("raw echo timed out");
        }
        const double us = watch.Micros();
        if (reply.size() != payload.size()) return Status::Internal("raw echo lost bytes");
        micros->push_back(us);
      }
    } catch (const zmq::error_t& e) {
      return Status::IOError(std::string("raw echo: ") + e.what());
    }
    return Status::OK();
  }

  Result<double> Stream(const Buffer& payload, uint64_t messages) override {
    try {
      Stopwatch watch;
      for (uint64_t i = 0; i < messages; ++i) {
        if (!push_.send(Constant(payload), zmq::send_flags::none)) {
          return Status::DeadlineExceeded("raw stream: send timed out");
        }
      }
      zmq::message_t reply;
      if (!ctl_.send(zmq::buffer(&messages, sizeof(messages)), zmq::send_flags::none) ||
          !ctl_.recv(reply, zmq::recv_flags::none)) {
        return Status::DeadlineExceeded("raw stream: no confirmation from the server");
      }
      return watch.Seconds();
    } catch (const zmq::error_t& e) {
      return Status::IOError(std::string("raw stream: ") + e.what());
    }
  }

 private:
  // A message over the payload's bytes without a copy: libzmq's constant-data form (no free
  // function), the fastest way plain ZeroMQ can send a buffer.
  static zmq::message_t Constant(const Buffer& payload) {
    return zmq::message_t(const_cast<std::byte*>(payload.data()), payload.size(), nullptr);
  }

  zmq::socket_t push_, req_, ctl_;
};

// ---------------------------------------------------------------------------------------------
// The benchmark

struct Figures {
  std::vector<double> rtt_us;    // every timed round trip, all repetitions
  std::vector<double> mb_per_s;  // one per repetition
  std::vector<double> msg_per_s;
  std::vector<double> cpu_ns;    // per one-way message, both processes, one per repetition
};

// One side of the comparison: its client (null when not measured) and what it measured.
struct Side {
  std::unique_ptr<EchoClient> client;
  Figures figures;

  nlohmann::json P50() const { return Figure(Percentile(figures.rtt_us, 50)); }
  nlohmann::json P99() const { return Figure(Percentile(figures.rtt_us, 99)); }
  nlohmann::json MBps() const { return Figure(Median(figures.mb_per_s)); }
  nlohmann::json KMsgps() const { return Figure(Median(figures.msg_per_s) / 1e3); }
  nlohmann::json CpuNs() const { return Figure(Median(figures.cpu_ns)); }
  nlohmann::json Figure(double v) const { return client ? nlohmann::json(v) : nlohmann::json(); }
};

// CPU seconds used so far by this process and the server's, together.
Result<double> BothProcessesCpuSeconds(pid_t server) {
  STRATA_ASSIGN_OR_RETURN(const double ours, ProcessCpuSeconds());
  STRATA_ASSIGN_OR_RETURN(const double its, ProcessCpuSeconds(server));
  return ours + its;
}

// Runs one repetition of both measurements for one client; `server` is the server's pid.
Status Measure(EchoClient& client, const Buffer& payload, int iters, uint64_t messages,
               pid_t server, Figures* f) {
  STRATA_RETURN_IF_ERROR(client.RoundTrips(payload, iters, &f->rtt_us));
  STRATA_ASSIGN_OR_RETURN(const double cpu_before, BothProcessesCpuSeconds(server));
  STRATA_ASSIGN_OR_RETURN(double seconds, client.Stream(payload, messages));
  STRATA_ASSIGN_OR_RETURN(const double cpu_after, BothProcessesCpuSeconds(server));
  f->mb_per_s.push_back(static_cast<double>(messages * payload.size()) / seconds / 1e6);
  f->msg_per_s.push_back(static_cast<double>(messages) / seconds);
  f->cpu_ns.push_back((cpu_after - cpu_before) / static_cast<double>(messages) * 1e9);
  return Status::OK();
}

nlohmann::json FiguresJson(const Figures& f) {
  return {{"p50_us", Percentile(f.rtt_us, 50)},
          {"p99_us", Percentile(f.rtt_us, 99)},
          {"mb_per_s_reps", f.mb_per_s},
          {"msg_per_s_reps", f.msg_per_s},
          {"cpu_ns_per_msg_reps", f.cpu_ns}};
}

// The codec alone, on this thread: building and encoding the echo request of `payload` (a
// Message, its envelope, its frames), and decoding it (then freeing it), ns per message, median
// of `reps` passes over kCodecMessages; beside a memcpy of the same frames' bytes, the least a
// batch append does with them.
constexpr int kCodecMessages = 20000;

struct CodecFigures {
  std::vector<double> encode_ns, decode_ns, copy_ns;
};

Result<CodecFigures> MeasureCodec(const Buffer& payload, int reps) {
  CodecFigures f;
  std::vector<Frames> frames(kCodecMessages);
  std::vector<std::byte> sink;
  for (int rep = -1; rep < reps; ++rep) {  // rep -1 warms the allocator
    Stopwatch encode;
    for (Frames& m : frames) m = Encode(EchoMessage(&payload));
    const double encode_ns = encode.Micros() * 1e3 / kCodecMessages;
    sink.resize(frames[0][0].size() + payload.size());
    Stopwatch copy;
    for (const Frames& m : frames) {
      std::memcpy(sink.data(), m[0].data(), m[0].size());
      std::memcpy(sink.data() + m[0].size(), m[1].data(), m[1].size());
    }
    const double copy_ns = copy.Micros() * 1e3 / kCodecMessages;
    Stopwatch decode;
    for (Frames& m : frames) {
      auto decoded = Decode(std::move(m));
      if (!decoded.ok()) return decoded.status().WithContext("codec");
    }
    const double decode_ns = decode.Micros() * 1e3 / kCodecMessages;
    if (rep < 0) continue;
    f.encode_ns.push_back(encode_ns);
    f.copy_ns.push_back(copy_ns);
    f.decode_ns.push_back(decode_ns);
  }
  return f;
}

Result<Report> RunTransportBench(const Options& o) {
  STRATA_ASSIGN_OR_RETURN(std::vector<uint64_t> sizes, ParseByteSizes(o.sizes));
  std::vector<std::string> schemes = SplitList(o.transports);
  for (const std::string& s : schemes) {
    if (s != "tcp" && s != "ipc") return Status::InvalidArgument("unknown transport " + s);
  }
  if (schemes.empty()) return Status::InvalidArgument("no transports given");
  if (o.iters < 1 || o.reps < 1) return Status::InvalidArgument("--iters and --reps must be >= 1");
  const std::vector<std::string> peers = SplitList(o.peers);
  const bool run_ours = std::find(peers.begin(), peers.end(), "ours") != peers.end();
  const bool run_raw = std::find(peers.begin(), peers.end(), "raw") != peers.end();
  if (!run_ours && !run_raw) return Status::InvalidArgument("--peers: expected ours, raw or both");
  const Millis timeout(o.timeout_ms);

  if (o.coalesce_us < 0) return Status::InvalidArgument("--coalesce-us must be >= 0");
  TransportOptions transport;
  transport.coalesce_us = o.coalesce_us;
  std::optional<CpuSplit> cpus;
  if (o.pin) {
    STRATA_ASSIGN_OR_RETURN(cpus, SplitCpus());
  }
  // Fork first: the server must not inherit a process with threads.
  STRATA_ASSIGN_OR_RETURN(auto server, EchoServerProcess::Fork(schemes, timeout, transport,
                                                               cpus ? &cpus->others : nullptr));
  if (cpus) STRATA_RETURN_IF_ERROR(PinTo(cpus->mine));  // before any thread of ours starts
  zmq::context_t raw_context(1);

  Report report;
  Table table("strata-bench transport: echo round trips and one-way streams, ours vs raw ZeroMQ",
              {{"transport", "transport"},
               {"size", "size_bytes", Table::Format::kBytes},
               {"our p50 us", "our_p50_us", Table::Format::kFixed1},
               {"our p99 us", "our_p99_us", Table::Format::kFixed1},
               {"raw p50 us", "raw_p50_us", Table::Format::kFixed1},
               {"raw p99 us", "raw_p99_us", Table::Format::kFixed1},
               {"our MB/s", "our_mb_per_s", Table::Format::kFixed1},
               {"raw MB/s", "raw_mb_per_s", Table::Format::kFixed1},
               {"ratio", "ratio", Table::Format::kFixed2},
               {"our kmsg/s", "our_kmsg_per_s", Table::Format::kFixed1},
               {"raw kmsg/s", "raw_kmsg_per_s", Table::Format::kFixed1},
               {"our CPU ns/msg", "our_cpu_ns_per_msg", Table::Format::kFixed1},
               {"raw CPU ns/msg", "raw_cpu_ns_per_msg", Table::Format::kFixed1},
               {"CPU ratio", "cpu_ratio", Table::Format::kFixed2}});
  nlohmann::json details = nlohmann::json::array();
  nlohmann::json stream_messages = nlohmann::json::object();
  Table codec("the codec and the message path alone, one thread: ns per one-way echo",
              {{"size", "size_bytes", Table::Format::kBytes},
               {"build+encode ns", "encode_ns", Table::Format::kFixed1},
               {"decode+free ns", "decode_ns", Table::Format::kFixed1},
               {"memcpy of its bytes ns", "copy_ns", Table::Format::kFixed1},
               {"send path ns", "send_path_ns", Table::Format::kFixed1},
               {"receive path ns", "receive_path_ns", Table::Format::kFixed1}});
  if (run_ours) {
    for (uint64_t size : sizes) {
      const Buffer payload = Buffer::Take(std::vector<uint8_t>(size, 0x5a));
      STRATA_ASSIGN_OR_RETURN(CodecFigures c, MeasureCodec(payload, o.reps));
      nlohmann::json send_path, receive_path;  // null for a payload too large to batch
      if (size < ZmqTransport::kZeroCopyMinBytes) {
        STRATA_ASSIGN_OR_RETURN(MessagePathFigures m, MeasureMessagePath(payload, o.reps, kCodecMessages));
        send_path = Median(m.send_ns);
        receive_path = Median(m.receive_ns);
      }
      codec.AddRow({size, Median(c.encode_ns), Median(c.decode_ns), Median(c.copy_ns), send_path,
                    receive_path});
    }
  }

  for (const EchoServerAddresses& a : server->addresses()) {
    Side ours, raw;
    if (run_ours) {
      STRATA_ASSIGN_OR_RETURN(ours.client, OurClient::Connect(a, transport, timeout));
    }
    try {
      if (run_raw) raw.client = std::make_unique<RawClient>(raw_context, a, timeout);
    } catch (const zmq::error_t& e) {
      return Status::IOError(std::string("raw client: ") + e.what());
    }
    for (uint64_t size : sizes) {
      const uint64_t messages = StreamMessages(o, size);
      stream_messages[std::to_string(size)] = messages;
      std::cerr << "transport: " << a.scheme << " " << FormatBytes(size) << ": " << o.reps << " x ("
                << o.iters << " round trips + " << messages << " one-way messages)\n";
      const Buffer payload = Buffer::Take(std::vector<uint8_t>(size, 0x5a));
      ours.figures = raw.figures = Figures();
      // Warm-up (connections, allocator pools, caches), then repetitions interleaved so that
      // drift in the machine's load hits both sides alike.
      for (int rep = -1; rep < o.reps; ++rep) {
        for (auto [side, name] : {std::pair{&ours, "ours"}, std::pair{&raw, "raw"}}) {
          if (!side->client) continue;
          Figures warm;
          const bool warming = rep < 0;
          Status s = warming ? Measure(*side->client, payload, std::max(10, o.iters / 10),
                                       std::max<uint64_t>(1, messages / 10), server->pid(), &warm)
                             : Measure(*side->client, payload, o.iters, messages, server->pid(),
                                       &side->figures);
          STRATA_RETURN_IF_ERROR(s.WithContext(name));
        }
      }
      const bool both = ours.client && raw.client;
      const double ratio = Median(ours.figures.mb_per_s) / Median(raw.figures.mb_per_s);
      const double cpu_ratio = Median(raw.figures.cpu_ns) / Median(ours.figures.cpu_ns);
      auto if_both = [both](double v) { return both ? nlohmann::json(v) : nlohmann::json(); };
      table.AddRow({a.scheme, size, ours.P50(), ours.P99(), raw.P50(), raw.P99(), ours.MBps(),
                    raw.MBps(), if_both(ratio), ours.KMsgps(), raw.KMsgps(), ours.CpuNs(),
                    raw.CpuNs(), if_both(cpu_ratio)});
      details.push_back({{"transport", a.scheme},
                         {"size_bytes", size},
                         {"messages", messages},
                         {"ours", FiguresJson(ours.figures)},
                         {"raw", FiguresJson(raw.figures)}});
    }
  }

  report.tables.push_back(std::move(table));
  if (run_ours) report.tables.push_back(std::move(codec));
  report.details = {{"runs", std::move(details)}};
  report.config = {{"iters", o.iters},
                   {"reps", o.reps},
                   {"sizes", sizes},
                   {"transports", schemes},
                   {"stream_messages", stream_messages},
                   {"server", "forked child process"},
                   {"coalesce_us", o.coalesce_us},
                   {"pin", o.pin},
                   {"cpus", std::thread::hardware_concurrency()}};
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  char load_text[64];
  std::snprintf(load_text, sizeof(load_text), "%.2f", load[0]);
  report.notes = {
      "server: a forked child process on this host. ours: RpcEndpoint over ZmqTransport "
      "(DEALER -> ROUTER), echo op with one u8 payload. raw: libzmq in the same two processes, "
      "REQ/REP ping-pong and PUSH/PULL stream, payload sent from constant memory (no copy).",
      "latency: p50/p99 over all " + std::to_string(o.reps) + " x " + std::to_string(o.iters) +
          " round trips (the payload travels both ways; ours includes building the message).",
      "throughput: one-way stream, from the first send until the server confirms it has every "
      "message; median of " +
          std::to_string(o.reps) +
          " repetitions. MB = 10^6 payload bytes. ratio = our MB/s / raw MB/s.",
      "CPU ns/msg: the CPU time both processes (every thread, user and system) used during a "
      "stream, per message, median of the repetitions; CPU ratio = raw's / ours (above 1: ours "
      "costs less). Steadier than the rates: on a machine with few cores the rate is set by the "
      "CPU a message costs, and libzmq's own rate moves with how its threads happen to batch.",
      "codec: this process alone, on one thread: building and encoding the echo request "
      "(Message, envelope, frames) and decoding it (then freeing it), median of the repetitions "
      "over " + std::to_string(kCodecMessages) + " messages; beside, a memcpy of its frames' bytes. "
      "send path: RpcEndpoint::Notify of the same message through the codec into frame batches, "
      "as a sender's thread does; receive path: those batches unpacked, decoded and handed to a "
      "handler as Requests, then freed, as the receiver's I/O thread does (no sockets: the part "
      "of the stream's CPU per message that is above ZeroMQ; payloads under " +
          std::to_string(ZmqTransport::kZeroCopyMinBytes) + " bytes, which are batched).",
      "host: " + std::to_string(std::thread::hardware_concurrency()) +
          " cpus, 1-min load average at the end " + load_text + "."};
  if (o.pin) report.notes.push_back("--pin: this process on one CPU, the server process on the others.");
  return report;
}

}  // namespace

BenchFn SetupTransportBench(CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--iters", o->iters, "timed round trips per size and repetition")
      ->capture_default_str();
  app.add_option("--reps", o->reps, "repetitions (interleaved ours/raw)")->capture_default_str();
  app.add_option("--messages", o->messages,
                 "messages per one-way stream (0: about 1 GiB, 256..200000)")
      ->capture_default_str();
  app.add_option("--sizes", o->sizes, "payload sizes, comma-separated (64,4KiB,1MiB)")
      ->capture_default_str();
  app.add_option("--transports", o->transports, "tcp, ipc or both, comma-separated")
      ->capture_default_str();
  app.add_option("--peers", o->peers, "ours, raw or both (one alone is for profiling)")
      ->capture_default_str();
  app.add_option("--timeout-ms", o->timeout_ms, "limit on every wait for the server")
      ->capture_default_str();
  app.add_option("--coalesce-us", o->coalesce_us,
                 "ours: transport.coalesce_us of both processes (0: every batch leaves at once)")
      ->capture_default_str();
  app.add_flag("--pin", o->pin, "this process on the first CPU it may use, the server on the others");
  return [o] { return RunTransportBench(*o); };
}

}  // namespace strata::bench
