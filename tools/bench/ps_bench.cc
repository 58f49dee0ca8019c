// ps_bench.cc: strata-bench ps. Starts a scheduler and S strata-server processes on loopback,
// joins as one trainer, and measures dense push/pull GB/s (whole tensors, chunked over the
// servers), one call in flight and several, and sparse pull/push rows/s with p50/p99 per batch
// (Zipf(1.1) keys), beside raw ZeroMQ PUSH/PULL throughput of the same payload sizes measured in
// the same run.
#include <CLI/CLI.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <thread>
#include <zmq.hpp>

#include "ps/client.h"
#include "tools/bench/bench.h"
#include "tools/bench/echo_server.h"

namespace strata::bench {
namespace {

struct PsBenchOptions {
  std::string servers = "1,2";
  std::string dense_sizes = "1MiB,4MiB,16MiB,64MiB";
  std::string batches = "1000,10000,100000";
  std::string dims = "16,32,128";
  // The wide part of a click-through-rate model: narrow rows in huge batches, measured too.
  std::string wide_batches = "100000,1000000";
  std::string wide_dims = "1,8";
  double seconds = 0.5;  // time spent on each measurement (at least 3 repetitions)
  int in_flight = 4;     // dense calls kept in flight by the pipelined measurement
  uint64_t chunk_bytes = 0;  // dense tables' chunk (0: TableSpec's default)
  uint64_t key_space = 10000000;
  bool pin = false;  // this process on one CPU, the processes it starts on the others
};

// A child running a strata binary; SIGTERM then reaped on destruction.
class Child {
 public:
  // Runs on `cpus` if given.
  explicit Child(std::vector<std::string> argv, const cpu_set_t* cpus = nullptr) {
    pid_ = fork();
    if (pid_ == 0) {
      if (cpus && sched_setaffinity(0, sizeof(*cpus), cpus) != 0) _exit(126);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~Child() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int status;
    waitpid(pid_, &status, 0);
  }

 private:
  pid_t pid_ = -1;
};

// Zipf(s) over ranks 1..n by inverse CDF; ranks are scattered over the key space by a hash.
class Zipf {
 public:
  Zipf(double s, size_t n, uint64_t seed) : rng_(seed), cdf_(n) {
    double sum = 0;
    for (size_t i = 0; i < n; ++i) cdf_[i] = (sum += 1.0 / std::pow(i + 1.0, s));
    for (double& c : cdf_) c /= sum;
  }
  uint64_t Next() {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng_);
    const size_t rank = std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
    return (rank + 1) * 0x9E3779B97F4A7C15ull;
  }

 private:
  std::mt19937_64 rng_;
  std::vector<double> cdf_;
};

struct Timing {
  double median_s = 0;
  double p50_ms = 0;
  double p99_ms = 0;
};

// Repeats `op` for about `seconds` (at least 3 times); returns its median, p50 and p99.
Result<Timing> Measure(double seconds, const std::function<Status()>& op) {
  std::vector<double> samples;
  Stopwatch total;
  while (samples.size() < 3 || (total.Seconds() < seconds && samples.size() < 100000)) {
    Stopwatch w;
    STRATA_RETURN_IF_ERROR(op());
    samples.push_back(w.Seconds());
  }
  return Timing{Median(samples), Percentile(samples, 50) * 1e3, Percentile(samples, 99) * 1e3};
}

// GB/s of `bytes`-sized calls kept `depth` in flight for about `seconds`, as a trainer that
// prefetches the next layers' parameters keeps them: `issue(slot)` starts a call whose output
// (if any) goes to slot `slot`, whose last call is waited for first. The median over batches of
// 4 x depth calls.
Result<double> MeasureInFlight(double seconds, int depth, uint64_t bytes,
                               const std::function<PsTicket(int slot)>& issue, PsClient& client) {
  std::vector<PsTicket> slots(static_cast<size_t>(depth));
  for (int i = 0; i < depth; ++i) slots[i] = issue(i);
  std::vector<double> samples;
  Stopwatch total;
  const int batch = 4 * depth;
  while (samples.size() < 3 || (total.Seconds() < seconds && samples.size() < 10000)) {
    Stopwatch w;
    for (int c = 0; c < batch; ++c) {
      const int slot = c % depth;
      STRATA_RETURN_IF_ERROR(client.Wait(slots[slot]));
      slots[slot] = issue(slot);
    }
    samples.push_back(static_cast<double>(batch) * bytes / w.Seconds() / 1e9);
  }
  for (auto& t : slots) STRATA_RETURN_IF_ERROR(client.Wait(t));
  return Median(samples);
}

// Sets what the raw peer does with each message it receives from now on (EchoServerAddresses::ctl).
Status SetRawPass(zmq::context_t& ctx, const EchoServerAddresses& a, RawPass pass, uint64_t span) try {
  zmq::socket_t ctl(ctx, zmq::socket_type::req);
  ctl.set(zmq::sockopt::linger, 0);
  ctl.set(zmq::sockopt::rcvtimeo, 60000);
  ctl.connect(a.ctl);
  const uint64_t setup[3] = {0, static_cast<uint64_t>(pass), span};
  zmq::message_t answer;
  ctl.send(zmq::buffer(setup, sizeof(setup)), zmq::send_flags::none);
  if (!ctl.recv(answer, zmq::recv_flags::none)) return Status::DeadlineExceeded("raw peer: pass not confirmed");
  return Status::OK();
} catch (const zmq::error_t& e) {
  return Status::IOError(std::string("raw peer's control socket ") + a.ctl + ": " + e.what());
}

// Raw ZeroMQ: GB/s of a one-way stream of `bytes`-sized messages to the echo server's PULL,
// over about `seconds`; the receiver does `pass` with each message, into a tensor of `span`
// bytes.
Result<double> RawStream(zmq::context_t& ctx, const EchoServerAddresses& a, size_t bytes, double seconds,
                         RawPass pass = RawPass::kNone, uint64_t span = 0) try {
  // Before the sockets, which may send from it. Gradient-like floats, for the SGD pass.
  std::vector<char> payload(bytes, 0);
  const float g = 1e-6f;
  for (size_t at = 0; at + sizeof(g) <= bytes; at += sizeof(g)) std::memcpy(payload.data() + at, &g, sizeof(g));
  zmq::socket_t push(ctx, zmq::socket_type::push), ctl(ctx, zmq::socket_type::req);
  push.connect(a.pull);
  ctl.connect(a.ctl);
  ctl.set(zmq::sockopt::rcvtimeo, 60000);
  STRATA_RETURN_IF_ERROR(SetRawPass(ctx, a, pass, span));
  auto run = [&](uint64_t n) -> Result<double> {
    Stopwatch w;
    for (uint64_t i = 0; i < n; ++i) push.send(zmq::message_t(payload.data(), payload.size(), nullptr), zmq::send_flags::none);
    zmq::message_t reply;
    // The server counts messages since its last confirmation.
    ctl.send(zmq::buffer(&n, sizeof(n)), zmq::send_flags::none);
    if (!ctl.recv(reply, zmq::recv_flags::none)) return Status::DeadlineExceeded("raw stream: no confirmation");
    return w.Seconds();
  };
  STRATA_ASSIGN_OR_RETURN(double first, run(2));
  const uint64_t n = std::max<uint64_t>(3, static_cast<uint64_t>(seconds / std::max(first / 2, 1e-6)));
  STRATA_ASSIGN_OR_RETURN(double t, run(n));
  return n * bytes / t / 1e9;
} catch (const zmq::error_t& e) {
  return Status::IOError(std::string("raw stream to ") + a.pull + ": " + e.what());
}

// Raw ZeroMQ, one call in flight as a trainer makes it: a tensor of `bytes` as requests of at
// most `chunk` bytes sent together from a DEALER, then every reply awaited; the echo server's
// rpc socket answers each from memory. `push`: the requests carry the bytes and the replies 8;
// else the requests carry 8 and the replies the bytes. GB/s of the median call over `seconds`:
// what the wire and libzmq allow one call, without an apply or a copy into a tensor. With
// `with_pass`, what they allow one call that does what ours must: the peer applies SGD to each
// pushed chunk, or this side copies each pulled chunk into a tensor.
Result<double> RawCalls(zmq::context_t& ctx, const EchoServerAddresses& a, uint64_t bytes, uint64_t chunk,
                        bool push, double seconds, bool with_pass = false) try {
  STRATA_RETURN_IF_ERROR(SetRawPass(ctx, a, push && with_pass ? RawPass::kSgd : RawPass::kNone, bytes));
  // Before the socket, so that it outlives any send still queued from it (a timeout).
  std::vector<float> payload(push ? chunk / sizeof(float) : 0, 1e-6f);
  std::vector<float> tensor(!push && with_pass ? bytes / sizeof(float) : 0);
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::rcvtimeo, 60000);
  dealer.connect(a.rpc);
  auto call = [&]() -> Status {
    int requests = 0;
    for (uint64_t at = 0; at < bytes; at += chunk, ++requests) {
      const uint64_t n = std::min(chunk, bytes - at);
      const uint64_t reply_bytes = push ? 8 : n;
      dealer.send(zmq::message_t(), zmq::send_flags::sndmore);  // REP's empty delimiter
      const auto more = push ? zmq::send_flags::sndmore : zmq::send_flags::none;
      dealer.send(zmq::buffer(&reply_bytes, sizeof(reply_bytes)), more);
      if (push) dealer.send(zmq::message_t(payload.data(), n, nullptr), zmq::send_flags::none);
    }
    zmq::message_t part;
    for (int r = 0; r < requests; ++r) {
      do {
        if (!dealer.recv(part, zmq::recv_flags::none)) return Status::DeadlineExceeded("raw calls: no reply");
      } while (part.more());
      // REP answers in order: reply r is chunk r.
      const uint64_t at = static_cast<uint64_t>(r) * chunk;
      if (!tensor.empty() && at + part.size() <= bytes) std::memcpy(tensor.data() + at / sizeof(float), part.data(), part.size());
    }
    return Status::OK();
  };
  STRATA_ASSIGN_OR_RETURN(Timing t, Measure(seconds, call));
  return bytes / t.median_s / 1e9;
} catch (const zmq::error_t& e) {
  return Status::IOError(std::string("raw calls to ") + a.rpc + ": " + e.what());
}

constexpr int kDenseRounds = 3;

Result<Report> Run(const PsBenchOptions& o) {
  const std::string bin = std::filesystem::canonical("/proc/self/exe").parent_path().string();
  STRATA_ASSIGN_OR_RETURN(auto dense_sizes, ParseByteSizes(o.dense_sizes));
  if (o.chunk_bytes % sizeof(float) != 0) {
    return Status::InvalidArgument("--chunk " + std::to_string(o.chunk_bytes) + " is not a whole number of floats");
  }
  std::vector<int> server_counts;
  for (auto& s : SplitList(o.servers)) server_counts.push_back(std::stoi(s));
  // (dim, batches) sweeps: the usual rows, then the wide part's.
  std::vector<std::pair<int, std::vector<int>>> sweeps;
  auto add_sweep = [&](const std::string& dims, const std::string& batches) {
    std::vector<int> b;
    for (auto& s : SplitList(batches)) b.push_back(std::stoi(s));
    for (auto& d : SplitList(dims)) sweeps.push_back({std::stoi(d), b});
  };
  add_sweep(o.dims, o.batches);
  if (!o.wide_dims.empty()) add_sweep(o.wide_dims, o.wide_batches);

  std::optional<CpuSplit> cpus;
  if (o.pin) {
    STRATA_ASSIGN_OR_RETURN(cpus, SplitCpus());
  }
  const cpu_set_t* others = cpus ? &cpus->others : nullptr;
  // The raw peer first: forking is only safe before this process starts threads.
  STRATA_ASSIGN_OR_RETURN(auto echo, EchoServerProcess::Fork({"tcp"}, Millis(20000), {}, others));
  if (cpus) STRATA_RETURN_IF_ERROR(PinTo(cpus->mine));  // before any thread of ours starts
  zmq::context_t raw_ctx(1);

  Report report;
  report.benchmark = "ps";
  report.config = {{"servers", o.servers}, {"dense_sizes", o.dense_sizes}, {"batches", o.batches},
                   {"dims", o.dims}, {"wide_batches", o.wide_batches}, {"wide_dims", o.wide_dims},
                   {"seconds", o.seconds}, {"in_flight", o.in_flight}, {"chunk_bytes", o.chunk_bytes},
                   {"pin", o.pin}};
  // The columns both dense tables have after their first: ours beside the raw streams.
  auto dense_columns = [](std::vector<Table::Column> first, std::vector<Table::Column> last) {
    const std::vector<Table::Column> streams = {
        {"push GB/s", "push_gb_per_s", Table::Format::kFixed2},
        {"pull GB/s", "pull_gb_per_s", Table::Format::kFixed2},
        {"raw GB/s", "raw_gb_per_s", Table::Format::kFixed2},
        {"push/raw", "push_ratio", Table::Format::kFixed2},
        {"pull/raw", "pull_ratio", Table::Format::kFixed2},
        {"raw@chunk GB/s", "raw_chunked_gb_per_s", Table::Format::kFixed2},
        {"push/raw@chunk", "push_chunked_ratio", Table::Format::kFixed2},
        {"pull/raw@chunk", "pull_chunked_ratio", Table::Format::kFixed2}};
    first.insert(first.end(), streams.begin(), streams.end());
    first.insert(first.end(), last.begin(), last.end());
    return first;
  };
  Table dense("dense tables: whole-tensor push and pull through the servers, beside raw ZeroMQ",
              dense_columns({{"servers", "servers", Table::Format::kInteger}, {"size", "bytes", Table::Format::kBytes}},
                            {{"raw call push GB/s", "raw_call_push_gb_per_s", Table::Format::kFixed2},
                             {"raw call pull GB/s", "raw_call_pull_gb_per_s", Table::Format::kFixed2},
                             {"push/raw call", "push_call_ratio", Table::Format::kFixed2},
                             {"pull/raw call", "pull_call_ratio", Table::Format::kFixed2},
                             {"push+pull GB/s", "push_pull_gb_per_s", Table::Format::kFixed2},
                             {"push+pull/raw calls", "push_pull_call_ratio", Table::Format::kFixed2}}));
  Table pipelined("dense tables, " + std::to_string(o.in_flight) +
                      " calls in flight (a trainer prefetching layers), beside the same raw stream",
                  dense_columns({{"servers", "servers", Table::Format::kInteger},
                                 {"size", "bytes", Table::Format::kBytes},
                                 {"in flight", "in_flight", Table::Format::kInteger}},
                                {}));
  Table passes("dense tables, one call, beside raw ZeroMQ doing the receiver's pass that ours does: SGD on each "
               "pushed chunk (the server's), a copy of each pulled chunk into the tensor (the client's)",
               {{"servers", "servers", Table::Format::kInteger},
                {"size", "bytes", Table::Format::kBytes},
                {"raw@chunk GB/s", "raw_chunked_gb_per_s", Table::Format::kFixed2},
                {"+sgd stream/raw@chunk", "raw_sgd_ratio", Table::Format::kFixed2},
                {"raw call+sgd GB/s", "raw_call_sgd_gb_per_s", Table::Format::kFixed2},
                {"raw call+sgd/raw@chunk", "raw_call_sgd_ratio", Table::Format::kFixed2},
                {"push/raw call+sgd", "push_sgd_ratio", Table::Format::kFixed2},
                {"+copy stream/raw@chunk", "raw_copy_ratio", Table::Format::kFixed2},
                {"raw call+copy GB/s", "raw_call_copy_gb_per_s", Table::Format::kFixed2},
                {"raw call+copy/raw@chunk", "raw_call_copy_ratio", Table::Format::kFixed2},
                {"pull/raw call+copy", "pull_copy_ratio", Table::Format::kFixed2}});
  Table sparse("sparse tables: pull and push of Zipf(1.1) keys (rows/s over whole batches)",
               {{"servers", "servers", Table::Format::kInteger},
                {"batch", "batch", Table::Format::kInteger},
                {"dim", "dim", Table::Format::kInteger},
                {"pull Mrows/s", "pull_mrows_per_s", Table::Format::kFixed2},
                {"pull p50 ms", "pull_p50_ms", Table::Format::kFixed2},
                {"pull p99 ms", "pull_p99_ms", Table::Format::kFixed2},
                {"push Mrows/s", "push_mrows_per_s", Table::Format::kFixed2},
                {"push p50 ms", "push_p50_ms", Table::Format::kFixed2},
                {"push p99 ms", "push_p99_ms", Table::Format::kFixed2}});

  for (int servers : server_counts) {
    char dir_template[] = "/tmp/strata-bench-ps-XXXXXX";
    const std::string dir = mkdtemp(dir_template);
    const std::vector<std::string> common = {
        "--set", "cluster.servers=" + std::to_string(servers), "--set", "cluster.trainers=1",
        "--set", "log.level=warn", "--set", "transport.request_timeout_ms=60000"};
    std::vector<std::string> sched = {bin + "/strata-scheduler", "--bind", "tcp://127.0.0.1:0",
                                      "--address-file", dir + "/addr"};
    sched.insert(sched.end(), common.begin(), common.end());
    std::vector<std::unique_ptr<Child>> children;
    children.push_back(std::make_unique<Child>(sched, others));
    std::string address;
    for (int i = 0; i < 2000 && !(std::ifstream(dir + "/addr") >> address); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (address.empty()) return Status::Unavailable("strata-scheduler did not start (is it next to strata-bench?)");
    for (int s = 0; s < servers; ++s) {
      std::vector<std::string> argv = {bin + "/strata-server", "--rank", std::to_string(s),
                                       "--stats-interval-ms", "0", "--set", "cluster.scheduler=" + address};
      argv.insert(argv.end(), common.begin(), common.end());
      children.push_back(std::make_unique<Child>(argv, others));
    }
    NodeOptions no;
    no.cluster.scheduler = address;
    no.cluster.servers = servers;
    no.cluster.trainers = 1;
    no.transport.request_timeout_ms = 60000;
    no.role = Role::kTrainer;
    Node node(no);
    STRATA_RETURN_IF_ERROR(node.Join());
    PsClient client(node, Millis(60000));
    uint32_t next_table = 1;

    for (uint64_t size : dense_sizes) {
      TableSpec t;
      t.id = next_table++;
      t.name = "dense" + std::to_string(t.id);
      t.kind = TableKind::kDense;
      t.numel = size / sizeof(float);
      t.consistency = Consistency::kAsp;
      if (o.chunk_bytes) t.chunk_floats = static_cast<uint32_t>(o.chunk_bytes / sizeof(float));
      STRATA_RETURN_IF_ERROR(client.CreateTable(t));
      std::vector<float> grads(t.numel, 1e-6f), values(t.numel);
      // Rounds of raw, push, pull back to back, so a ratio compares figures taken under the same
      // load on this shared host; the table gives the medians over the rounds.
      // raw: the tensor as one message; raw@chunk: the same bytes as chunk-sized messages, which
      // is what we send (a stricter peer where smaller messages move faster).
      const uint64_t chunk_bytes = std::min<uint64_t>(size, uint64_t{t.chunk_floats} * sizeof(float));
      std::vector<double> raw, chunked, push, pull, push_ratio, pull_ratio, push_cratio, pull_cratio;
      std::vector<double> call_push, call_pull, push_call_ratio, pull_call_ratio, push_pull, push_pull_ratio;
      std::vector<double> push_n, pull_n, push_n_ratio, pull_n_ratio, push_n_cratio, pull_n_cratio;
      std::vector<double> raw_sgd_ratio, raw_copy_ratio, call_sgd, call_copy, call_sgd_ratio, call_copy_ratio;
      std::vector<double> push_sgd_ratio, pull_copy_ratio;
      std::vector<std::vector<float>> outs(static_cast<size_t>(o.in_flight), std::vector<float>(t.numel));
      for (int round = 0; round < kDenseRounds; ++round) {
        STRATA_ASSIGN_OR_RETURN(const double r, RawStream(raw_ctx, echo->addresses()[0], size, o.seconds));
        double rc = r;
        if (chunk_bytes < size) {
          STRATA_ASSIGN_OR_RETURN(rc, RawStream(raw_ctx, echo->addresses()[0], chunk_bytes, o.seconds));
        }
        STRATA_ASSIGN_OR_RETURN(const double rs, RawStream(raw_ctx, echo->addresses()[0], chunk_bytes, o.seconds,
                                                           RawPass::kSgd, size));
        STRATA_ASSIGN_OR_RETURN(const double rcp, RawStream(raw_ctx, echo->addresses()[0], chunk_bytes, o.seconds,
                                                            RawPass::kCopy, size));
        STRATA_ASSIGN_OR_RETURN(const double raw_push_sgd, RawCalls(raw_ctx, echo->addresses()[0], size, chunk_bytes,
                                                                    true, o.seconds, /*with_pass=*/true));
        STRATA_ASSIGN_OR_RETURN(const double raw_pull_copy, RawCalls(raw_ctx, echo->addresses()[0], size,
                                                                     chunk_bytes, false, o.seconds, /*with_pass=*/true));
        STRATA_ASSIGN_OR_RETURN(const double raw_push,
                                RawCalls(raw_ctx, echo->addresses()[0], size, chunk_bytes, true, o.seconds));
        STRATA_ASSIGN_OR_RETURN(const double raw_pull,
                                RawCalls(raw_ctx, echo->addresses()[0], size, chunk_bytes, false, o.seconds));
        STRATA_ASSIGN_OR_RETURN(Timing pu, Measure(o.seconds, [&] {
          PsTicket tk = client.PushDense(t.id, grads.data());
          return client.Wait(tk);
        }));
        STRATA_ASSIGN_OR_RETURN(Timing pl, Measure(o.seconds, [&] {
          PsTicket tk = client.PullDense(t.id, values.data());
          return client.Wait(tk);
        }));
        // An offload step's shape: the gradients pushed, then the updated values pulled back.
        STRATA_ASSIGN_OR_RETURN(Timing pp, Measure(o.seconds, [&] {
          PsTicket push = client.PushDense(t.id, grads.data());
          STRATA_RETURN_IF_ERROR(client.Wait(push));
          PsTicket pull = client.PullDense(t.id, values.data());
          return client.Wait(pull);
        }));
        push_pull.push_back(2.0 * size / pp.median_s / 1e9);
        push_pull_ratio.push_back(push_pull.back() / (2.0 / (1.0 / raw_push + 1.0 / raw_pull)));
        STRATA_ASSIGN_OR_RETURN(const double pun, MeasureInFlight(o.seconds, o.in_flight, size, [&](int) {
          return client.PushDense(t.id, grads.data());
        }, client));
        STRATA_ASSIGN_OR_RETURN(const double pln, MeasureInFlight(o.seconds, o.in_flight, size, [&](int slot) {
          return client.PullDense(t.id, outs[slot].data());
        }, client));
        push_n.push_back(pun);
        pull_n.push_back(pln);
        push_n_ratio.push_back(pun / r);
        pull_n_ratio.push_back(pln / r);
        push_n_cratio.push_back(pun / rc);
        pull_n_cratio.push_back(pln / rc);
        raw.push_back(r);
        chunked.push_back(rc);
        push.push_back(size / pu.median_s / 1e9);
        pull.push_back(size / pl.median_s / 1e9);
        push_ratio.push_back(push.back() / r);
        pull_ratio.push_back(pull.back() / r);
        push_cratio.push_back(push.back() / rc);
        pull_cratio.push_back(pull.back() / rc);
        raw_sgd_ratio.push_back(rs / rc);
        raw_copy_ratio.push_back(rcp / rc);
        call_sgd.push_back(raw_push_sgd);
        call_copy.push_back(raw_pull_copy);
        call_sgd_ratio.push_back(raw_push_sgd / rc);
        call_copy_ratio.push_back(raw_pull_copy / rc);
        push_sgd_ratio.push_back(push.back() / raw_push_sgd);
        pull_copy_ratio.push_back(pull.back() / raw_pull_copy);
        call_push.push_back(raw_push);
        call_pull.push_back(raw_pull);
        push_call_ratio.push_back(push.back() / raw_push);
        pull_call_ratio.push_back(pull.back() / raw_pull);
      }
      dense.AddRow({servers, size, Median(push), Median(pull), Median(raw), Median(push_ratio),
                    Median(pull_ratio), Median(chunked), Median(push_cratio), Median(pull_cratio),
                    Median(call_push), Median(call_pull), Median(push_call_ratio), Median(pull_call_ratio),
                    Median(push_pull), Median(push_pull_ratio)});
      passes.AddRow({servers, size, Median(chunked), Median(raw_sgd_ratio), Median(call_sgd), Median(call_sgd_ratio),
                     Median(push_sgd_ratio), Median(raw_copy_ratio), Median(call_copy), Median(call_copy_ratio),
                     Median(pull_copy_ratio)});
      pipelined.AddRow({servers, size, o.in_flight, Median(push_n), Median(pull_n), Median(raw), Median(push_n_ratio),
                        Median(pull_n_ratio), Median(chunked), Median(push_n_cratio), Median(pull_n_cratio)});
    }
    for (const auto& [dim, batches] : sweeps) {
      TableSpec t;
      t.id = next_table++;
      t.name = "sparse" + std::to_string(t.id);
      t.kind = TableKind::kSparse;
      t.dim = dim;
      t.init = InitSpec::Of(InitKind::kUniform, -0.01f, 0.01f, 1);
      t.consistency = Consistency::kAsp;
      STRATA_RETURN_IF_ERROR(client.CreateTable(t));
      for (int batch : batches) {
        Zipf zipf(1.1, 1000000, 7);
        std::vector<std::vector<uint64_t>> key_sets(std::clamp(4000000 / batch, 2, 16));
        for (auto& ks : key_sets) {
          ks.resize(batch);
          for (auto& k : ks) k = zipf.Next() % o.key_space;
        }
        std::vector<float> grads(static_cast<size_t>(batch) * dim, 1e-6f), values(grads.size());
        size_t round = 0;
        STRATA_ASSIGN_OR_RETURN(Timing pull, Measure(o.seconds, [&] {
          PsTicket tk = client.Pull(t.id, key_sets[round++ % key_sets.size()], values.data());
          return client.Wait(tk);
        }));
        STRATA_ASSIGN_OR_RETURN(Timing push, Measure(o.seconds, [&] {
          PsTicket tk = client.Push(t.id, key_sets[round++ % key_sets.size()], grads.data());
          return client.Wait(tk);
        }));
        sparse.AddRow({servers, batch, dim, batch / pull.median_s / 1e6, pull.p50_ms, pull.p99_ms,
                       batch / push.median_s / 1e6, push.p50_ms, push.p99_ms});
      }
    }
    (void)node.Leave();
    children.clear();  // SIGTERM: the scheduler tells the servers to stop
    std::filesystem::remove_all(dir);
  }
  report.tables.push_back(std::move(dense));
  report.tables.push_back(std::move(sparse));
  report.tables.push_back(std::move(pipelined));
  report.tables.push_back(std::move(passes));
  const uint64_t chunk = o.chunk_bytes ? o.chunk_bytes : uint64_t{TableSpec{}.chunk_floats} * sizeof(float);
  report.notes.push_back("servers: strata-server processes on this host (ASP tables, SGD on push); the client "
                         "is one trainer in this process, one call in flight (the third table: --in-flight). "
                         "Dense chunks of " + std::to_string(chunk >> 10) + " KiB (" +
                         (o.chunk_bytes ? "--chunk" : "the tables' default") +
                         "), spread round-robin, one request each.");
  if (o.pin) {
    report.notes.push_back("--pin: this process (the client, and the raw peers' sending side) on one CPU; the "
                           "scheduler, the servers and the raw peers' receiving process on the others.");
  }
  report.notes.push_back("raw: libzmq PUSH/PULL one-way stream of messages of the same size (raw@chunk: of chunk-sized messages) to another process. "
                         "Raw, push and pull are measured back to back in 3 rounds; each column is the median over the rounds, "
                         "the ratios medians of the rounds' ratios. Our dense figure also includes the server applying SGD to every float. "
                         "Every process here keeps freed large blocks for reuse (TuneHostMallocForLargeBuffers), the raw peer too.");
  report.notes.push_back("raw call: libzmq, one call in flight as ours: the tensor as chunk-sized requests from a DEALER, sent "
                         "together, then every reply awaited (push: the requests carry the bytes, 8-byte replies; pull: 8-byte "
                         "requests, the replies carry the bytes, sent from memory without a copy), to one process whose single thread "
                         "answers them in turn. No apply and no copy into a tensor: what one call to one server can move through "
                         "libzmq on this host, where the stream columns never wait. With more than one server ours spreads the "
                         "chunks over them, so its ratio to this peer may exceed 1.");
  report.notes.push_back("receiver's pass (the last table): the raw stream at chunk size, and the raw call, with the "
                         "receiving side doing what ours must. +sgd: the raw peer's thread runs the servers' SGD kernel "
                         "on each message (or pushed chunk) into its own copy of the tensor; +copy: the raw stream's "
                         "receiver, or the raw call's caller, copies each message into a tensor. Their ratios to "
                         "raw@chunk are what that pass leaves of the plain stream on this host; ours to the raw call "
                         "with the pass is what our code costs beyond it.");
  report.notes.push_back("push+pull: an offload step's shape, the tensor pushed and then pulled back (each awaited), both "
                         "tensors' bytes over the pair's median time; beside, the raw push call then the raw pull call "
                         "(the harmonic mean of their rates).");
  report.notes.push_back("calls in flight: the same tensor pushed (or pulled, each call into its own output) again as "
                         "each of the last --in-flight calls completes, oldest first, in the same rounds as the raw "
                         "stream; the median of batches of 4 x in-flight calls. What a trainer that prefetches the next "
                         "layers' parameters (offload) keeps going; the stream is the bound for it.");
  report.notes.push_back("sparse keys: Zipf(1.1) ranks over 1e6 hot ids hashed into a 1e7 key space; pull creates "
                         "rows on first touch; rows/s counts keys sent (duplicates included) per whole-batch round trip.");
  return report;
}

}  // namespace

BenchFn SetupPsBench(CLI::App& app) {
  auto o = std::make_shared<PsBenchOptions>();
  app.add_option("--servers", o->servers, "server counts to measure, comma-separated");
  app.add_option("--dense-sizes", o->dense_sizes, "dense tensor sizes");
  app.add_option("--batches", o->batches, "sparse keys per call");
  app.add_option("--dims", o->dims, "sparse row widths");
  app.add_option("--wide-batches", o->wide_batches, "keys per call of the wide (narrow-row) sweep");
  app.add_option("--wide-dims", o->wide_dims, "row widths of the wide sweep (empty: skip it)");
  app.add_option("--seconds", o->seconds, "time per measurement")->check(CLI::Range(0.01, 60.0));
  app.add_option("--chunk", o->chunk_bytes, "dense tables' chunk in bytes, a multiple of 4 (0: the tables' default)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 30));
  app.add_option("--in-flight", o->in_flight, "dense calls kept in flight by the pipelined measurement")
      ->check(CLI::Range(1, 64));
  app.add_flag("--pin", o->pin,
               "this process (the client) on the first CPU it may use, the servers, scheduler and raw peer on the "
               "others (ours and raw placed alike)");
  return [o] { return Run(*o); };
}

}  // namespace strata::bench
