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

// A group is n ranks `stride` apart (mesh order pp, dp, cp, tp: a tp group has stride 1, a dp
// group stride tp, a pipeline's neighbours stride dp x tp). With `ranks_per_node` set, ranks
// r / ranks_per_node share a node: a group that fits in one node (n x stride <= ranks_per_node)
// uses the intra-node fits, one that spans nodes the inter-node fits (its ring is as slow as
// the link between nodes). ranks_per_node 0: one host, every group intra-node (what
// MeasureCommCosts measures).
struct CommCosts {
  std::map<int, LinkFit> all_reduce;  // by group size: an all-reduce of `bytes` per rank
  LinkFit p2p;                        // one send of `bytes` to a peer (and its receive)
  std::map<int, double> scalar_all_reduce;  // by group size: seconds for a step's scalar (a double)
  // The same with the ranks calling together (the collectives after a step's first; tensor
  // parallelism's, whose ranks do the same work before): on shared cores these cost more.
  std::map<int, LinkFit> all_reduce_together;
  std::map<int, double> scalar_all_reduce_together;
  // By group size: an all-reduce of at most kShmAllReduceMaxBytes (gloo_communicator.h) inside
  // a node, which goes through shared memory, one after another and together. Empty (a stated
  // device): those take the ring's fits too.
  std::map<int, LinkFit> shm_all_reduce, shm_all_reduce_together;
  int ranks_per_node = 0;
  std::map<int, LinkFit> all_reduce_inter;  // groups that span nodes
  LinkFit p2p_inter;                        // a send between nodes

  // 0 for a group of one. A size not measured takes the nearest measured one, its bandwidth
  // term scaled by the ring's 2(n-1)/n (shared memory's: n - 1). Reduce-scatter and all-gather (`bytes`: the full
  // buffer) are a ring's half of an all-reduce: latency + half the bandwidth term.
  double AllReduce(int n, double bytes, int stride = 1) const;
  double ReduceScatter(int n, double bytes, int stride = 1) const;
  double AllGather(int n, double bytes, int stride = 1) const;
  // A send between neighbours of a pipeline of `n` ranks `stride` apart: inter-node when the
  // pipeline spans nodes (its slowest hop).
  double P2P(double bytes, int n = 2, int stride = 1) const;
  // An all-reduce its ranks call together (AllReduce's: one they reach one after another);
  // AllReduce where that was not measured.
  double AllReduceTogether(int n, double bytes, int stride = 1) const;
  // A step's scalar all-reduce (the loss, a norm), reached one after another or `together`:
  // measured per group size where it was, else the all-reduce fit at 8 bytes.
  double ScalarAllReduce(int n, int stride = 1, bool together = false) const;
  bool SpansNodes(int n, int stride) const { return ranks_per_node > 0 && n * stride > ranks_per_node; }
  bool OverSharedMemory(int n, double bytes, int stride) const;
  bool empty() const { return all_reduce.empty(); }
};

// Measures all-reduce on every group size in `sizes` (>= 2) and a point-to-point send, each at
// a small and a large message (the all-reduce's on Gloo's ring, above the shared-memory limit,
// and through shared memory at 4 KiB and the limit), and an all-reduce of one double (`reps` timed repetitions after
// one warm-up, each from the last rank's call to the last rank's return, the ranks calling 0.3
// ms apart as after uneven work; per group the mean of the fastest 90%, then the median over
// the groups), and fits the two points. Under the job's own load: world / n groups of n measure at once (the job's
// groups of that size communicate together), so a host whose `world` trainers share its cores
// gives each group the latency and bandwidth it will see. The all-reduce's large point is
// `large_bytes` (the job's gradients; clamped to 1-64 MiB), its ring's small point twice the
// shared-memory limit; the send's points 8 KiB and 1 MiB.
Result<CommCosts> MeasureCommCosts(const std::vector<int>& sizes, int world, int64_t large_bytes, int reps = 20);

// The cache: an entry "comm <host>" in the calibration file (the caller's `host` names the
// world too: CommCostsKey). Load gives empty costs when absent.
std::string CommCostsKey(const std::string& host, int world, int64_t large_bytes);  // "vm world=4 large=16777216"
Result<CommCosts> LoadCommCosts(const std::string& path, const std::string& host);
Status SaveCommCosts(const std::string& path, const std::string& host, const CommCosts& costs);

}  // namespace strata
