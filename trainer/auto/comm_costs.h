// comm_costs.h: CommCosts, what a collective costs on this machine, measured on real Gloo
// communicators (ranks as threads of this process, pairs over TCP loopback: the transport the
// CPU trainers use) and fitted per group size as latency + bytes x seconds-per-byte. Cached in
// the same file as the calibration (calibrate.h), keyed by the host's name given by the caller.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace strata {

struct LinkFit {
  double latency_s = 0;
  double s_per_byte = 0;
  double Seconds(double bytes) const { return latency_s + bytes * s_per_byte; }
};

struct CommCosts {
  std::map<int, LinkFit> all_reduce;  // by group size: an all-reduce of `bytes` per rank
  LinkFit p2p;                        // one send of `bytes` to a peer (and its receive)

  // 0 for a group of one. A size not measured takes the nearest measured one, its bandwidth
  // term scaled by the ring's 2(n-1)/n. Reduce-scatter and all-gather (`bytes`: the full
  // buffer) are a ring's half of an all-reduce: latency + half the bandwidth term.
  double AllReduce(int n, double bytes) const;
  double ReduceScatter(int n, double bytes) const;
  double AllGather(int n, double bytes) const;
  double P2P(double bytes) const;
  bool empty() const { return all_reduce.empty(); }
};

// Measures all-reduce on every group size in `sizes` (>= 2) and a point-to-point send, each at
// a small and a large message (`reps` timed repetitions after one warm-up, medians), and fits
// the two points.
Result<CommCosts> MeasureCommCosts(const std::vector<int>& sizes, int reps = 5);

// The cache: an entry "comm <host>" in the calibration file. Load gives empty costs when absent.
Result<CommCosts> LoadCommCosts(const std::string& path, const std::string& host);
Status SaveCommCosts(const std::string& path, const std::string& host, const CommCosts& costs);

}  // namespace strata
