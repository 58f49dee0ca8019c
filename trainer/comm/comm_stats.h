// comm_stats.h: CommStats, what a Communicator has moved: calls and payload bytes per kind of
// operation (CommOp), and RingWireBytesPerRank, what a ring algorithm puts on each rank's link
// for a payload (to hold against a link's bandwidth).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace strata {

// The kinds of operation a Communicator counts. Tensor operations and the host-side small ones
// (AllReduceHost, BroadcastHost: a loss, a norm, a bucket order) are counted apart, so that a
// report tells tensors from scalars. ISend/IRecv count as kSend/kRecv.
enum class CommOp : uint8_t {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kSend,
  kRecv,
  kBarrier,
  kHostAllReduce,
  kHostBroadcast,
  kAllToAll,
};
inline constexpr size_t kNumCommOps = 10;

std::string_view CommOpName(CommOp op);  // "all_reduce", ..., "host_broadcast", "all_to_all"

// Calls and bytes of one kind of operation.
struct CommOpStats {
  uint64_t calls = 0;
  uint64_t bytes = 0;
  friend bool operator==(const CommOpStats&, const CommOpStats&) = default;
};

// A plain value: a communicator keeps one (Communicator::stats()); a step's traffic is the
// difference of two snapshots (after - before).
//
// Bytes are the logical payload of a call on the calling rank: the elements it passes times
// the element size (4 for floats, 8 for AllReduceHost's doubles), whatever the algorithm does
// on the wire:
//   all-reduce, broadcast, host ops:  count * size
//   reduce-scatter:                   the input, size() * count_per_rank * 4
//   all-gather:                       the output, size() * count * 4
//   all-to-all:                       the input, size() * count_per_rank * 4
//   send, recv:                       count * 4
//   barrier:                          0
// An operation is counted when it was issued successfully (complete on Gloo, enqueued on NCCL,
// posted for ISend/IRecv); a call that failed is not counted.
struct CommStats {
  std::array<CommOpStats, kNumCommOps> ops{};

  void Record(CommOp op, uint64_t bytes) {
    CommOpStats& s = ops[static_cast<size_t>(op)];
    ++s.calls;
    s.bytes += bytes;
  }
  const CommOpStats& operator[](CommOp op) const { return ops[static_cast<size_t>(op)]; }
  uint64_t total_bytes() const;
  uint64_t total_calls() const;

  CommStats& operator+=(const CommStats& other);
  // What was recorded since `before`, a snapshot of the same communicator.
  CommStats operator-(const CommStats& before) const;
  friend bool operator==(const CommStats&, const CommStats&) = default;
};

// Bytes each rank sends for one call of `op` with `bytes` of payload (as CommStats counts it)
// in a group of `n` ranks, when the collective runs as a ring (as NCCL's and Gloo's large
// collectives do; nccl-tests' "busbw" is this over the time):
//   all-reduce: 2 (n-1)/n * bytes     reduce-scatter, all-gather, all-to-all: (n-1)/n * bytes
//   broadcast:  bytes (a pipelined chain forwards the whole buffer)
//   send: bytes; recv, barrier: 0 (what the rank receives is its peer's send)
// Linear in `bytes`, so it applies to a sum of calls as well. 0 when n < 2.
double RingWireBytesPerRank(CommOp op, double bytes, int n);

}  // namespace strata
