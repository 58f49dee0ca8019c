// comm_costs.cc: MeasureCommCosts (in-process Gloo communicators) and their cache entry.
#include "trainer/auto/comm_costs.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "cluster/inproc_cluster.h"
#include "common/file.h"
#include "trainer/comm/gloo_communicator.h"
#include "trainer/train_options.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
// floats: 8 KiB, the send's latency point.
constexpr size_t kSmall = 2048;
// floats: the all-reduce's points. Up to kShmAllReduceMaxBytes a group on one host all-reduces
// through shared memory (fitted from 4 KiB and that limit), above it on Gloo's ring (fitted from
// twice the limit and the job's size); a step's scalars are measured apart.
constexpr size_t kShmSmall = 1024;
constexpr size_t kShmLarge = kShmAllReduceMaxBytes / sizeof(float);
constexpr size_t kRingSmall = 2 * kShmLarge;
constexpr size_t kLarge = 256 * 1024; // floats: 1 MiB, the point-to-point bandwidth point
constexpr size_t kMaxLarge = 16 * 1024 * 1024;  // floats: 64 MiB, the largest all-reduce measured
constexpr std::chrono::microseconds kStagger{300};  // between the ranks' calls

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The mean of the fastest 90% (at least one dropped when there are two or more). A step pays a
// collective's expected cost, not its median: on cores the ranks share, a rank's wake-up is
// sometimes immediate and sometimes a scheduler slice later, and a median of few repetitions
// picks one mode or the other from run to run. The slowest are dropped as one-off preemptions.
double TrimmedMeanOf(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t keep = v.size() < 2 ? v.size() : std::min(v.size() - 1, (v.size() * 9 + 9) / 10);
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += v[i];
  return sum / static_cast<double>(keep);
}

// Through (small, small_s) and (large, large_s), counts in floats.
LinkFit Fit(double small_s, size_t small, double large_s, size_t large) {
  LinkFit f;
  const double db = static_cast<double>((large - small) * sizeof(float));
  f.s_per_byte = std::max(0.0, (large_s - small_s) / db);
  f.latency_s = std::max(0.0, small_s - f.s_per_byte * static_cast<double>(small * sizeof(float)));
  return f;
}

// `copies` groups of n ranks, all threads of this process (a scheduler and n x copies nodes for
// the rendezvous), measuring at once, so each group sees the load of the whole world doing the
// same (a job's dp groups all-reduce together; its pipelines hand off together). Per group, the
// all-reduce (and, with n == 2, a send from 0 to 1 answered by 1) at both sizes; the result is
// the median over the groups.
//
// What a repetition costs is timed from the last rank's arrival to the last rank's return (one
// steady clock: the ranks are threads). A collective cannot finish before its last rank calls
// it, and in a job that wait is the skew of the work before it (the pipeline's tail, one rank's
// slower optimizer), which the step's other parts already count; timing each rank from its own
// call would count the barrier's release skew on this busy host as the collective's latency
// (session 17: 2.6 and 5.0 ms fitted for a 2- and 4-rank all-reduce of 1 KiB, where a pp 4
// job's trace showed its last rank's scalar all-reduce at 0.5 ms).
// Each collective twice: the ranks calling one after another (asleep inside it when the last
// arrives: the first collective after uneven work) and together (the next one, which they all
// reach as the previous returns; on shared cores every rank and Gloo thread then competes).
struct GroupFits {
  LinkFit all_reduce, p2p, all_reduce_together, shm_all_reduce, shm_all_reduce_together;
  double scalar_s = 0, scalar_together_s = 0;
};

Result<GroupFits> MeasureGroup(int n, int copies, size_t large, int reps) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<InprocCluster> cluster, StartInprocTrainers(n * copies));
  std::vector<std::unique_ptr<Node>>& nodes = cluster->nodes;

  // stamps[group][op][rank][rep]: (called, returned).
  // all-reduce small, large; ping small, large; scalar; then all-reduce small, large and scalar
  // with the ranks calling together; then the shared-memory all-reduce's two points, one after
  // another and together.
  constexpr int kOps = 12;
  using Stamp = std::pair<Clock::time_point, Clock::time_point>;
  std::vector<std::vector<std::vector<std::vector<Stamp>>>> stamps(
      static_cast<size_t>(copies),
      std::vector<std::vector<std::vector<Stamp>>>(kOps, std::vector<std::vector<Stamp>>(static_cast<size_t>(n))));
  std::mutex mu;
  Status failed;
  auto rank_main = [&](int g, int r) -> Status {
    // Point-to-point as a job's pipeline on this host moves it: through shared memory
    // (parallel.shm_ring_mb's default); collectives on Gloo above kShmAllReduceMaxBytes.
    GlooOptions gloo;
    gloo.shm_ring_bytes = static_cast<uint64_t>(ParallelOptions{}.shm_ring_mb * (1 << 20));
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> c,
                            MakeGlooCommunicator(*nodes[g * n + r], "plan/comm/" + std::to_string(g), r, n, gloo));
    std::vector<float> buf(std::max({large, kLarge, kRingSmall}), 1.0f);
    auto time = [&](int op_index, size_t count, auto&& op) -> Status {
      std::vector<Stamp>& mine = stamps[g][op_index][r];
      const bool together = (op_index >= 5 && op_index < 8) || op_index >= 10;
      for (int rep = 0; rep < reps + 1; ++rep) {
        STRATA_RETURN_IF_ERROR(c->Barrier());
        // Staggered, the ranks call one after another, as they reach a step's first collective
        // from work that ends at different times: the earlier ones wait inside it (asleep, as in
        // a job) for the last, whose call starts the clock.
        if (!together) std::this_thread::sleep_for(kStagger * r);
        const auto start = Clock::now();
        STRATA_RETURN_IF_ERROR(op(count));
        if (rep > 0) mine.emplace_back(start, Clock::now());
      }
      return Status::OK();
    };
    auto all_reduce = [&](size_t count) { return c->AllReduce(buf.data(), count, ReduceOp::kSum); };
    // A round trip: 0 sends, 1 answers with the same size; half of it is one send.
    auto ping = [&](size_t count) -> Status {
      if (r == 0) {
        STRATA_RETURN_IF_ERROR(c->Send(buf.data(), count, 1, 1));
        return c->Recv(buf.data(), count, 1, 2);
      }
      if (r == 1) {
        STRATA_RETURN_IF_ERROR(c->Recv(buf.data(), count, 0, 1));
        return c->Send(buf.data(), count, 0, 2);
      }
      return Status::OK();
    };
    STRATA_RETURN_IF_ERROR(time(0, kRingSmall, all_reduce));
    STRATA_RETURN_IF_ERROR(time(1, large, all_reduce));
    STRATA_RETURN_IF_ERROR(time(2, kSmall, ping));
    STRATA_RETURN_IF_ERROR(time(3, kLarge, ping));
    // A step's scalar (its loss, a gradient norm): one double. Not the small point of the fit:
    // Gloo's ring moves a buffer of fewer elements than ranks in fewer messages, and on the
    // 2-core host 2 doubles over 4 ranks took 0.5 ms where 16 floats took 2 (and 2 doubles over
    // 2 ranks, 2).
    double scalar = 1;
    auto scalar_all_reduce = [&](size_t count) { return c->AllReduceHost(&scalar, count, ReduceOp::kSum); };
    STRATA_RETURN_IF_ERROR(time(4, 1, scalar_all_reduce));
    STRATA_RETURN_IF_ERROR(time(5, kRingSmall, all_reduce));
    STRATA_RETURN_IF_ERROR(time(6, large, all_reduce));
    STRATA_RETURN_IF_ERROR(time(7, 1, scalar_all_reduce));
    STRATA_RETURN_IF_ERROR(time(8, kShmSmall, all_reduce));
    STRATA_RETURN_IF_ERROR(time(9, kShmLarge, all_reduce));
    STRATA_RETURN_IF_ERROR(time(10, kShmSmall, all_reduce));
    STRATA_RETURN_IF_ERROR(time(11, kShmLarge, all_reduce));
    return Status::OK();
  };
  std::vector<std::thread> threads;
  for (int g = 0; g < copies; ++g) {
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, g, r] {
        Status s = rank_main(g, r);
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (failed.ok()) {
            failed = s.WithContext("measuring collectives, group " + std::to_string(g) + " rank " + std::to_string(r));
          }
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  STRATA_RETURN_IF_ERROR(failed);
  // Per group and op: each repetition from its last call to its last return.
  std::vector<double> per_op[kOps];
  for (int g = 0; g < copies; ++g) {
    for (int op = 0; op < kOps; ++op) {
      const int ranks = op == 2 || op == 3 ? 2 : n;  // the ping is ranks 0 and 1's
      std::vector<double> t;
      for (int rep = 0; rep < reps; ++rep) {
        Clock::time_point called{}, returned{};
        for (int r = 0; r < ranks; ++r) {
          called = std::max(called, stamps[g][op][r][rep].first);
          returned = std::max(returned, stamps[g][op][r][rep].second);
        }
        t.push_back(std::chrono::duration<double>(returned - called).count());
      }
      per_op[op].push_back(TrimmedMeanOf(t));
    }
  }
  GroupFits fits;
  fits.all_reduce = Fit(MedianOf(per_op[0]), kRingSmall, MedianOf(per_op[1]), large);
  fits.p2p = Fit(MedianOf(per_op[2]) / 2, kSmall, MedianOf(per_op[3]) / 2, kLarge);
  fits.scalar_s = MedianOf(per_op[4]);
  fits.all_reduce_together = Fit(MedianOf(per_op[5]), kRingSmall, MedianOf(per_op[6]), large);
  fits.scalar_together_s = MedianOf(per_op[7]);
  fits.shm_all_reduce = Fit(MedianOf(per_op[8]), kShmSmall, MedianOf(per_op[9]), kShmLarge);
  fits.shm_all_reduce_together = Fit(MedianOf(per_op[10]), kShmSmall, MedianOf(per_op[11]), kShmLarge);
  return fits;
}

nlohmann::json ToJson(const LinkFit& f) { return {{"latency_s", f.latency_s}, {"s_per_byte", f.s_per_byte}}; }
LinkFit FromJson(const nlohmann::json& j) {
  return {j.at("latency_s").get<double>(), j.at("s_per_byte").get<double>()};
}

}  // namespace

namespace {

double RingAllReduce(const std::map<int, LinkFit>& fits, int n, double bytes) {
  if (n <= 1 || fits.empty()) return 0;
  auto it = fits.lower_bound(n);
  if (it == fits.end()) it = std::prev(it);
  const int m = it->first;
  const double ring = (2.0 * (n - 1) / n) / (2.0 * (m - 1) / m);
  return it->second.latency_s + bytes * it->second.s_per_byte * ring;
}

// Through rank 0: the n - 1 others' buffers in, the result out, so the bytes term grows with
// n - 1 from the nearest measured size's.
double GatheredAllReduce(const std::map<int, LinkFit>& fits, int n, double bytes) {
  auto it = fits.lower_bound(n);
  if (it == fits.end()) it = std::prev(it);
  const double scale = static_cast<double>(n - 1) / static_cast<double>(it->first - 1);
  return it->second.latency_s + bytes * it->second.s_per_byte * scale;
}

double RingHalf(const std::map<int, LinkFit>& fits, int n, double bytes) {
  if (n <= 1 || fits.empty()) return 0;
  const double whole = RingAllReduce(fits, n, bytes);
  auto it = fits.lower_bound(n);
  const double lat = it == fits.end() ? fits.rbegin()->second.latency_s : it->second.latency_s;
  return lat + (whole - lat) / 2;
}

}  // namespace

bool CommCosts::OverSharedMemory(int n, double bytes, int stride) const {
  return n > 1 && !SpansNodes(n, stride) && !shm_all_reduce.empty() && bytes <= kShmAllReduceMaxBytes;
}
double CommCosts::AllReduce(int n, double bytes, int stride) const {
  if (OverSharedMemory(n, bytes, stride)) return GatheredAllReduce(shm_all_reduce, n, bytes);
  return RingAllReduce(SpansNodes(n, stride) ? all_reduce_inter : all_reduce, n, bytes);
}
double CommCosts::ReduceScatter(int n, double bytes, int stride) const {
  return RingHalf(SpansNodes(n, stride) ? all_reduce_inter : all_reduce, n, bytes);
}
double CommCosts::AllGather(int n, double bytes, int stride) const { return ReduceScatter(n, bytes, stride); }
double CommCosts::AllReduceTogether(int n, double bytes, int stride) const {
  if (SpansNodes(n, stride) || all_reduce_together.empty()) return AllReduce(n, bytes, stride);
  if (OverSharedMemory(n, bytes, stride)) {
    return GatheredAllReduce(shm_all_reduce_together.empty() ? shm_all_reduce : shm_all_reduce_together, n, bytes);
  }
  return RingAllReduce(all_reduce_together, n, bytes);
}

double CommCosts::ScalarAllReduce(int n, int stride, bool together) const {
  if (n <= 1) return 0;
  const std::map<int, double>& m = together ? scalar_all_reduce_together : scalar_all_reduce;
  if (!SpansNodes(n, stride)) {
    auto it = m.find(n);
    if (it == m.end()) it = m.lower_bound(n);
    if (it == m.end() && !m.empty()) it = std::prev(it);
    if (it != m.end()) return it->second;
  }
  return together ? AllReduceTogether(n, 8, stride) : AllReduce(n, 8, stride);
}
double CommCosts::P2P(double bytes, int n, int stride) const {
  return (SpansNodes(n, stride) ? p2p_inter : p2p).Seconds(bytes);
}

Result<CommCosts> MeasureCommCosts(const std::vector<int>& sizes, int world, int64_t large_bytes, int reps) {
  // The bandwidth point at the size the job moves: a fit from 1 MiB alone misses what a buffer
  // past the caches costs (memory traffic of the reduction and the copies).
  const size_t large = std::clamp<size_t>(static_cast<size_t>(std::max<int64_t>(0, large_bytes)) / sizeof(float),
                                          std::max(kLarge, 2 * kRingSmall), kMaxLarge);
  CommCosts costs;
  for (int n : sizes) {
    if (n < 2) continue;
    STRATA_ASSIGN_OR_RETURN(auto fits, MeasureGroup(n, std::max(1, world / n), large, reps));
    costs.all_reduce[n] = fits.all_reduce;
    costs.all_reduce_together[n] = fits.all_reduce_together;
    costs.scalar_all_reduce[n] = fits.scalar_s;
    costs.scalar_all_reduce_together[n] = fits.scalar_together_s;
    costs.shm_all_reduce[n] = fits.shm_all_reduce;
    costs.shm_all_reduce_together[n] = fits.shm_all_reduce_together;
    if (n == 2) costs.p2p = fits.p2p;
  }
  if (costs.all_reduce.empty()) {
    STRATA_ASSIGN_OR_RETURN(auto fits, MeasureGroup(2, std::max(1, world / 2), large, reps));
    costs.p2p = fits.p2p;  // no group larger than one: only the pipeline's sends could matter
  }
  return costs;
}

std::string CommCostsKey(const std::string& host, int world, int64_t large_bytes) {
  return host + " world=" + std::to_string(world) + " large=" + std::to_string(large_bytes) + " p2p=shm last-arrival together shm-all-reduce<=" +
         std::to_string(kShmAllReduceMaxBytes);
}

Result<CommCosts> LoadCommCosts(const std::string& path, const std::string& host) {
  CommCosts costs;
  std::ifstream in(path);
  if (!in) return costs;
  nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return Status::Corruption(path + ": not a JSON object (strata-plan's calibration cache)");
  const std::string key = "comm " + host;
  if (!doc.contains(key)) return costs;
  try {
    for (const auto& [n, f] : doc[key].at("all_reduce").items()) costs.all_reduce[std::stoi(n)] = FromJson(f);
    costs.p2p = FromJson(doc[key].at("p2p"));
    for (const auto& [n, t] : doc[key].at("scalar_all_reduce_s").items()) {
      costs.scalar_all_reduce[std::stoi(n)] = t.get<double>();
    }
    for (const auto& [n, t] : doc[key].at("scalar_all_reduce_together_s").items()) {
      costs.scalar_all_reduce_together[std::stoi(n)] = t.get<double>();
    }
    for (const auto& [n, f] : doc[key].at("all_reduce_together").items()) {
      costs.all_reduce_together[std::stoi(n)] = FromJson(f);
    }
    for (const auto& [n, f] : doc[key].at("shm_all_reduce").items()) costs.shm_all_reduce[std::stoi(n)] = FromJson(f);
    for (const auto& [n, f] : doc[key].at("shm_all_reduce_together").items()) {
      costs.shm_all_reduce_together[std::stoi(n)] = FromJson(f);
    }
  } catch (const std::exception& e) {
    return Status::Corruption(path + ": entry \"" + key + "\": " + e.what());
  }
  return costs;
}

Status SaveCommCosts(const std::string& path, const std::string& host, const CommCosts& costs) {
  nlohmann::json doc = nlohmann::json::object();
  if (std::ifstream in(path); in) {
    doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object()) doc = nlohmann::json::object();
  }
  nlohmann::json ar = nlohmann::json::object();
  for (const auto& [n, f] : costs.all_reduce) ar[std::to_string(n)] = ToJson(f);
  nlohmann::json scalar = nlohmann::json::object(), scalar_together = nlohmann::json::object(),
                 together = nlohmann::json::object();
  for (const auto& [n, t] : costs.scalar_all_reduce) scalar[std::to_string(n)] = t;
  for (const auto& [n, t] : costs.scalar_all_reduce_together) scalar_together[std::to_string(n)] = t;
  for (const auto& [n, f] : costs.all_reduce_together) together[std::to_string(n)] = ToJson(f);
  nlohmann::json shm = nlohmann::json::object(), shm_together = nlohmann::json::object();
  for (const auto& [n, f] : costs.shm_all_reduce) shm[std::to_string(n)] = ToJson(f);
  for (const auto& [n, f] : costs.shm_all_reduce_together) shm_together[std::to_string(n)] = ToJson(f);
  doc["comm " + host] = {{"all_reduce", ar},
                         {"p2p", ToJson(costs.p2p)},
                         {"scalar_all_reduce_s", scalar},
                         {"all_reduce_together", together},
                         {"scalar_all_reduce_together_s", scalar_together},
                         {"shm_all_reduce", shm},
                         {"shm_all_reduce_together", shm_together}};
  std::error_code ec;
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  return WriteFileDurably(path, doc.dump(1) + "\n");  // a reader sees the old cache or the new
}

}  // namespace strata
