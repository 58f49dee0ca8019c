// comm_stats.cc: CommStats and the ring estimate of wire bytes.
#include "trainer/comm/comm_stats.h"

namespace strata {

std::string_view CommOpName(CommOp op) {
  switch (op) {
    case CommOp::kAllReduce:
      return "all_reduce";
    case CommOp::kReduceScatter:
      return "reduce_scatter";
    case CommOp::kAllGather:
      return "all_gather";
    case CommOp::kBroadcast:
      return "broadcast";
    case CommOp::kSend:
      return "send";
    case CommOp::kRecv:
      return "recv";
    case CommOp::kBarrier:
      return "barrier";
    case CommOp::kHostAllReduce:
      return "host_all_reduce";
    case CommOp::kHostBroadcast:
      return "host_broadcast";
    case CommOp::kAllToAll:
      return "all_to_all";
  }
  return "?";
}

uint64_t CommStats::total_bytes() const {
  uint64_t sum = 0;
  for (const CommOpStats& s : ops) sum += s.bytes;
  return sum;
}

uint64_t CommStats::total_calls() const {
  uint64_t sum = 0;
  for (const CommOpStats& s : ops) sum += s.calls;
  return sum;
}

CommStats& CommStats::operator+=(const CommStats& other) {
  for (size_t i = 0; i < kNumCommOps; ++i) {
    ops[i].calls += other.ops[i].calls;
    ops[i].bytes += other.ops[i].bytes;
  }
  return *this;
}

CommStats CommStats::operator-(const CommStats& before) const {
  CommStats d;
  for (size_t i = 0; i < kNumCommOps; ++i) {
    d.ops[i].calls = ops[i].calls - before.ops[i].calls;
    d.ops[i].bytes = ops[i].bytes - before.ops[i].bytes;
  }
  return d;
}

double RingWireBytesPerRank(CommOp op, double bytes, int n) {
  if (n < 2) return 0;
  const double share = static_cast<double>(n - 1) / n;
  switch (op) {
    case CommOp::kAllReduce:
    case CommOp::kHostAllReduce:
      return 2 * share * bytes;
    case CommOp::kReduceScatter:
    case CommOp::kAllGather:
    case CommOp::kAllToAll:  // keeps its own block, sends the other n-1
      return share * bytes;
    case CommOp::kBroadcast:
    case CommOp::kHostBroadcast:
    case CommOp::kSend:
      return bytes;
    case CommOp::kRecv:
    case CommOp::kBarrier:
      return 0;
  }
  return 0;
}

}  // namespace strata
