// allreduce_bench.cc: strata-bench allreduce: Communicator::AllReduce (sum, Gloo backend) beside
// gloo::allreduce called directly on a Gloo context built with Gloo's own HashStore and TCP
// device, on the same buffers in the same run. Ranks are threads of this process, each with its
// own TCP pairs over loopback; figures are nccl-tests' time, algbw and busbw.
#include <gloo/allreduce.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdlib>
#include <future>
#include <iostream>
#include <mutex>
#include <thread>

#include "cluster/inproc_cluster.h"
#include "tools/bench/bench.h"
#include "trainer/comm/gloo_communicator.h"

namespace strata::bench {
namespace {

struct Options {
  std::string ranks = "2,4";
  std::string min = "4KiB";
  std::string max = "256MiB";
  int step = 4;          // size multiplier between points
  double seconds = 1.5;  // per size and rank count, both sides together (at least 5 samples each)
  int timeout_ms = 120000;
};

constexpr int kMinSamples = 5;                  // per side, however slow the op
constexpr int kMaxSamples = 2000;               // per side, however fast
constexpr uint64_t kWarmupBytes = 64ull << 20;  // warm-up ops: up to this much, at most 20

enum Side { kOurs = 0, kGloo = 1 };

// The k-th timed op's side: ABBA order, so that drift in the machine's load hits both alike.
Side SideOf(size_t k) { return (k % 4 == 0 || k % 4 == 3) ? kOurs : kGloo; }

// What the rank threads share: a host barrier (never inside a timed op), rank 0's decisions,
// each rank's per-op times.
struct Shared {
  explicit Shared(int n) : sync(n), seconds(n) {}
  std::barrier<> sync;
  std::atomic<bool> failed{false};
  std::mutex mu;
  Status error;
  int samples = 0;                               // per side, decided by rank 0 for each size
  std::vector<std::vector<double>> seconds;      // [rank]: the current size's op times, in order
  std::vector<std::vector<double>> per_size[2];  // [side][size index]: samples (slowest rank)

  void Fail(Status s) {
    std::lock_guard<std::mutex> lock(mu);
    if (error.ok()) error = std::move(s);
    failed = true;
  }
};

// gloo::allreduce on our buffer, exactly as a Gloo user would call it.
class RawGloo {
 public:
  RawGloo(gloo::rendezvous::Store& store, int rank, int size, Millis timeout) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    context_ = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context_->setTimeout(timeout);
    context_->connectFullMesh(store, device);
  }
  void AllReduce(float* data, size_t count) {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, count);
    opts.setTag(tag_++);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    gloo::allreduce(opts);
  }

 private:
  std::shared_ptr<gloo::rendezvous::Context> context_;
  uint32_t tag_ = 1;
};

// Everything one rank does for every size; rank 0 also decides the sample counts.
Status RankMain(int r, int n, Node& node, gloo::rendezvous::Store& store, const Options& o,
                const std::vector<uint64_t>& sizes, Shared& sh) {
  GlooOptions go;
  go.timeout = Millis(o.timeout_ms);
  STRATA_ASSIGN_OR_RETURN(auto ours, MakeGlooCommunicator(node, "bench", r, n, go));
  std::unique_ptr<RawGloo> gloo;
  try {
    gloo::rendezvous::PrefixStore prefixed("raw", store);
    gloo = std::make_unique<RawGloo>(prefixed, r, n, Millis(o.timeout_ms));
  } catch (const std::exception& e) {
    return Status::Unavailable(std::string("gloo rendezvous: ") + e.what());
  }
  // Zeros: float addition costs the same for every normal value, and zeros stay clear of
  // infinities and denormals however many times they are summed.
  std::vector<float> buffer(sizes.back() / sizeof(float), 0.0f);
  auto run = [&](Side side, size_t count) -> Status {
    if (side == kOurs) return ours->AllReduce(buffer.data(), count, ReduceOp::kSum);
    try {
      gloo->AllReduce(buffer.data(), count);
      return Status::OK();
    } catch (const std::exception& e) {
      return Status::Unavailable(std::string("gloo::allreduce: ") + e.what());
    }
  };
  auto sync = [&]() -> Status {
    sh.sync.arrive_and_wait();
    return sh.failed ? Status::Aborted("another rank failed") : Status::OK();
  };

  for (size_t i = 0; i < sizes.size(); ++i) {
    const size_t count = sizes[i] / sizeof(float);
    // Warm-up pairs; their median is rank 0's estimate of an op's time.
    const int warmup = static_cast<int>(std::clamp<uint64_t>(kWarmupBytes / sizes[i], 1, 20));
    std::vector<double> warm;
    for (int k = 0; k < warmup; ++k) {
      for (Side side : {kOurs, kGloo}) {
        Stopwatch w;
        STRATA_RETURN_IF_ERROR(run(side, count));
        warm.push_back(w.Seconds());
      }
    }
    if (r == 0) {
      const double per_op = std::max(Median(warm), 1e-7);
      sh.samples = std::clamp(static_cast<int>(o.seconds / 2 / per_op), kMinSamples, kMaxSamples);
    }
    STRATA_RETURN_IF_ERROR(sync());
    const int samples = sh.samples;
    // One sample per op, back to back with no barrier between them (the collective itself keeps
    // the ranks in step), sides interleaved.
    std::vector<double>& mine = sh.seconds[r];
    mine.clear();
    for (int k = 0; k < 2 * samples; ++k) {
      Stopwatch w;
      STRATA_RETURN_IF_ERROR(run(SideOf(k), count));
      mine.push_back(w.Seconds());
    }
    STRATA_RETURN_IF_ERROR(sync());
    if (r == 0) {
      // An op's time is the slowest rank's: from its call to its return.
      for (size_t k = 0; k < mine.size(); ++k) {
        double slowest = 0;
        for (const auto& rank_times : sh.seconds) slowest = std::max(slowest, rank_times[k]);
        sh.per_size[SideOf(k)][i].push_back(slowest);
      }
    }
    STRATA_RETURN_IF_ERROR(sync());
  }
  return Status::OK();
}

// Runs every size on n ranks (threads): a scheduler and n nodes in this process for our
// rendezvous, a HashStore for Gloo's.
Status RunRanks(int n, const Options& o, const std::vector<uint64_t>& sizes, Shared& sh) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<InprocCluster> cluster, StartInprocTrainers(n));
  std::vector<std::unique_ptr<Node>>& nodes = cluster->nodes;

  gloo::rendezvous::HashStore store;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Status s = RankMain(r, n, *nodes[r], store, o, sizes, sh);
      if (!s.ok()) {
        sh.Fail(s.WithContext("rank " + std::to_string(r)));
        sh.sync.arrive_and_drop();  // the others must not wait for this rank at the barrier
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& node : nodes) (void)node->Leave();
  std::lock_guard<std::mutex> lock(sh.mu);
  return sh.error;
}

Result<Report> RunAllreduceBench(const Options& o) {
  STRATA_ASSIGN_OR_RETURN(uint64_t min_bytes, ParseByteSize(o.min));
  STRATA_ASSIGN_OR_RETURN(uint64_t max_bytes, ParseByteSize(o.max));
  if (o.step < 2) return Status::InvalidArgument("--step must be >= 2");
  if (min_bytes < sizeof(float) || max_bytes < min_bytes) {
    return Status::InvalidArgument("need 4 <= --min <= --max");
  }
  std::vector<uint64_t> sizes;
  for (uint64_t b = min_bytes; b <= max_bytes; b *= o.step) {
    sizes.push_back(b / sizeof(float) * sizeof(float));
  }
  std::vector<int> rank_counts;
  for (const std::string& s : SplitList(o.ranks)) {
    const int n = std::atoi(s.c_str());
    if (n < 1) return Status::InvalidArgument("--ranks: bad count \"" + s + "\"");
    rank_counts.push_back(n);
  }

  Report report;
  Table table(
      "strata-bench allreduce: Communicator::AllReduce (Gloo backend, sum) vs gloo::allreduce",
      {{"ranks", "ranks", Table::Format::kInteger},
       {"size", "size_bytes", Table::Format::kBytes},
       {"our us", "our_us", Table::Format::kFixed1},
       {"gloo us", "gloo_us", Table::Format::kFixed1},
       {"our algbw GB/s", "our_algbw_gb_per_s", Table::Format::kFixed3},
       {"our busbw GB/s", "our_busbw_gb_per_s", Table::Format::kFixed3},
       {"gloo algbw GB/s", "gloo_algbw_gb_per_s", Table::Format::kFixed3},
       {"gloo busbw GB/s", "gloo_busbw_gb_per_s", Table::Format::kFixed3},
       {"overhead %", "overhead_pct", Table::Format::kFixed1},
       {"spread %", "spread_pct", Table::Format::kFixed1},
       {"samples", "samples", Table::Format::kInteger}});
  nlohmann::json details = nlohmann::json::array();
  Stopwatch total;
  for (int n : rank_counts) {
    std::cerr << "allreduce: " << n << " ranks, " << sizes.size() << " sizes\n";
    Shared sh(n);
    for (auto& side : sh.per_size) side.resize(sizes.size());
    STRATA_RETURN_IF_ERROR(RunRanks(n, o, sizes, sh).WithContext(std::to_string(n) + " ranks"));
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::vector<double>& our_samples = sh.per_size[kOurs][i];
      const std::vector<double>& gloo_samples = sh.per_size[kGloo][i];
      const double ours = Median(our_samples), gloo = Median(gloo_samples);
      // The overhead from pairs of neighbouring ops (the k-th of each side are adjacent in ABBA
      // order), robust to the load changing in the middle of a point, which a ratio of the two
      // medians is not when there are few samples.
      std::vector<double> ratios;
      for (size_t k = 0; k < our_samples.size(); ++k) {
        ratios.push_back(our_samples[k] / gloo_samples[k]);
      }
      const double overhead = Median(ratios) - 1;
      const double spread = Percentile(ratios, 75) - Percentile(ratios, 25);
      const double bytes = static_cast<double>(sizes[i]);
      const double bus = n > 1 ? 2.0 * (n - 1) / n : 0.0;
      table.AddRow({n, sizes[i], ours * 1e6, gloo * 1e6, bytes / ours / 1e9,
                    bytes / ours / 1e9 * bus, bytes / gloo / 1e9, bytes / gloo / 1e9 * bus,
                    overhead * 100, spread * 100, our_samples.size()});
      details.push_back({{"ranks", n},
                         {"size_bytes", sizes[i]},
                         {"our_seconds", sh.per_size[kOurs][i]},
                         {"gloo_seconds", sh.per_size[kGloo][i]}});
    }
  }

  report.tables.push_back(std::move(table));
  report.details = {{"samples", std::move(details)}};
  report.config = {{"ranks", rank_counts},
                   {"sizes", sizes},
                   {"seconds", o.seconds},
                   {"cpus", std::thread::hardware_concurrency()}};
  const std::string text = HostLoadNote(std::thread::hardware_concurrency(), total.Seconds());
  report.notes = {
      "ranks: threads of this process, each with its own Gloo TCP device and pairs over "
      "loopback. ours: MakeGlooCommunicator (rendezvous through an in-process scheduler's kv "
      "store), AllReduce(kSum). gloo: gloo::allreduce (its ring, the algorithm ours calls) with "
      "gloo::sum<float>, on a context built with Gloo's own HashStore and TCP device. Both run "
      "in place on the same zero-filled buffer.",
      "time: one sample per op, the slowest rank's time from call to return; ops back to back, "
      "sides interleaved ABBA; median of the samples (samples: per side). algbw = bytes / time, "
      "busbw = algbw * 2(n-1)/n, GB = 10^9 B. overhead = our time / gloo time - 1, the median "
      "over pairs of neighbouring ops (one of each side); spread: the interquartile range of "
      "those ratios, in points: an overhead well inside it is noise.",
      text};
  return report;
}

}  // namespace

BenchFn SetupAllreduceBench(CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--ranks", o->ranks, "rank counts, comma-separated")->capture_default_str();
  app.add_option("--min", o->min, "smallest message (bytes; 4KiB, 1MiB...)")->capture_default_str();
  app.add_option("--max", o->max, "largest message")->capture_default_str();
  app.add_option("--step", o->step, "size multiplier between points (2 or 4)")
      ->capture_default_str();
  app.add_option("--seconds", o->seconds,
                 "time per size and rank count, both sides together (>= 5 samples each)")
      ->capture_default_str();
  app.add_option("--timeout-ms", o->timeout_ms, "limit on every collective and rendezvous")
      ->capture_default_str();
  return [o] { return RunAllreduceBench(*o); };
}

}  // namespace strata::bench
