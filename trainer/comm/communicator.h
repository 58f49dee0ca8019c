// communicator.h: Communicator, the collectives and point-to-point transfers trainers use when
// they do not go through the parameter servers: all-reduce, reduce-scatter, all-gather,
// all-to-all, broadcast, barrier, send and recv over a group of ranks. Backends: Gloo over TCP for host
// memory (gloo_communicator.h) and NCCL for device memory (nccl_communicator.h, CUDA builds).
// Every backend is bootstrapped through the scheduler's key-value store, so no extra rendezvous
// service is needed. Every communicator counts what it moves (CommStats, comm_stats.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/mesh.h"
#include "common/status.h"
#include "trainer/comm/comm_stats.h"

namespace strata {

// Not thread-safe: one thread issues a communicator's operations, collectives in the same order
// on every rank of its group (as with MPI, Gloo and NCCL).
//
// Memory and completion differ by backend; code written to this contract runs on both:
//  - Gloo: pointers are host memory. Every call returns when the operation is complete on this
//    rank, so its buffers may be read or reused at once. Synchronize() does nothing.
//  - NCCL: pointers are device memory. Every call enqueues the operation on the communicator's
//    stream and returns (stream-ordered): work issued later on that stream sees the results,
//    the host sees them after Synchronize(). Barrier() is the exception: it synchronizes.
//
// Errors (a bad rank or peer, a timeout, a peer that died) come back as Statuses. A timeout or a
// transport failure leaves the group out of step, so the communicator is broken from then on:
// later calls fail with FailedPrecondition naming the first error; destroy it and rebuild the
// group. InvalidArgument errors are caught before anything is sent and break nothing.
class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The name the group was created with ("trainers/dp/0"), for reports and errors.
  const std::string& name() const { return name_; }

  // What this communicator has moved since it was made (see comm_stats.h for what a byte
  // is). Updated by the thread that issues the operations; read it from that thread or after
  // synchronising with it. A step's traffic: snapshot stats() before, subtract after.
  const CommStats& stats() const { return stats_; }

  // The operations below are non-virtual: each counts itself in stats() and runs the backend's
  // Do* implementation, so a new backend cannot forget the accounting.

  // In place: every rank ends with the element-wise reduction of every rank's `data`.
  // kAvg divides the sum by size().
  Status AllReduce(float* data, size_t count, ReduceOp op);
  // `in` holds size() blocks of `count_per_rank` floats; rank r's `out` (count_per_rank floats)
  // gets the element-wise reduction of block r over every rank. `out` is apart from `in` (then
  // `in` is not modified) or, in place, exactly block r of `in` (as NCCL allows).
  Status ReduceScatter(const float* in, float* out, size_t count_per_rank, ReduceOp op);
  // `out` (size() * count floats) gets every rank's `in` (count floats), in rank order. `in`
  // is apart from `out` or, in place, exactly rank r's block of it.
  Status AllGather(const float* in, float* out, size_t count);
  // `in` holds size() blocks of `count_per_rank` floats; block j goes to rank j, and rank r's
  // `out` (size() blocks of the same size) gets rank j's block r as its block j (a transpose of
  // blocks across the group: MPI_Alltoall). `out` must not overlap `in`.
  Status AllToAll(const float* in, float* out, size_t count_per_rank);
  // Every rank ends with `root`'s `data`.
  Status Broadcast(float* data, size_t count, int root);
  Status Barrier();

  // Tags from here on are the communicator's own (small all-reduces through shared memory):
  // point-to-point calls with one are refused (InvalidArgument).
  static constexpr uint32_t kReservedTags = 0xF0000000u;

  // Point-to-point (pipeline stages): `count` floats to or from `peer` (another rank of this
  // group). A Send matches the Recv of the same tag on the peer, in issue order per (peer, tag);
  // counts must agree. Both block until the transfer is done (Gloo) or enqueue it (NCCL, which
  // ignores tags and matches in issue order per peer), so two ranks that both Send first
  // deadlock: order exchanges (e.g. even ranks send first) or use distinct phases.
  Status Send(const float* data, size_t count, int peer, uint32_t tag);
  Status Recv(float* data, size_t count, int peer, uint32_t tag);

  // A send or receive in flight (ISend, IRecv). Wait() returns when it is complete on this rank
  // (Gloo: the buffer may be reused or read; NCCL: as Synchronize), or fails after the
  // communicator's timeout. Destroying a request that was not waited for waits for it.
  class Request {
   public:
    virtual ~Request() = default;
    virtual Status Wait() = 0;
  };
  // Non-blocking Send and Recv: start the transfer and return. The buffer must stay valid, and
  // untouched, until Wait() returns. Matching is as for Send/Recv. Two neighbours that both
  // post a send and then a receive do not deadlock (pipeline stages do exactly that).
  Result<std::unique_ptr<Request>> ISend(const float* data, size_t count, int peer, uint32_t tag);
  Result<std::unique_ptr<Request>> IRecv(float* data, size_t count, int peer, uint32_t tag);

  // Waits until every operation issued so far is complete (see above). A no-op on Gloo.
  virtual Status Synchronize() { return Status::OK(); }

  // AllReduce and Broadcast of a few floats in host memory (a loss, a bucket order; not
  // tensors), complete on return. A communicator of host memory runs them directly; a
  // device-memory one (NCCL) stages them through the device and waits. Counted as host ops.
  Status AllReduceHost(float* host, size_t count, ReduceOp op);
  Status BroadcastHost(float* host, size_t count, int root);
  // The same for doubles (a step's loss is summed in double precision, as one process does).
  Status AllReduceHost(double* host, size_t count, ReduceOp op);

 protected:
  explicit Communicator(std::string name) : name_(std::move(name)) {}

  // The backend's operations, with the contracts above. They must not call the public
  // operations (that would count twice): one Do* may call another.
  virtual Status DoAllReduce(float* data, size_t count, ReduceOp op) = 0;
  virtual Status DoReduceScatter(const float* in, float* out, size_t count_per_rank, ReduceOp op) = 0;
  virtual Status DoAllGather(const float* in, float* out, size_t count) = 0;
  virtual Status DoAllToAll(const float* in, float* out, size_t count_per_rank) = 0;
  virtual Status DoBroadcast(float* data, size_t count, int root) = 0;
  virtual Status DoBarrier() = 0;
  virtual Status DoSend(const float* data, size_t count, int peer, uint32_t tag) = 0;
  virtual Status DoRecv(float* data, size_t count, int peer, uint32_t tag) = 0;
  virtual Result<std::unique_ptr<Request>> DoISend(const float* data, size_t count, int peer,
                                                   uint32_t tag) = 0;
  virtual Result<std::unique_ptr<Request>> DoIRecv(float* data, size_t count, int peer,
                                                   uint32_t tag) = 0;
  virtual Status DoAllReduceHost(float* host, size_t count, ReduceOp op) { return DoAllReduce(host, count, op); }
  virtual Status DoBroadcastHost(float* host, size_t count, int root) { return DoBroadcast(host, count, root); }
  virtual Status DoAllReduceHost(double* host, size_t count, ReduceOp op) = 0;

 private:
  // Counts one call of `op` with `bytes` of payload when `s` is OK; returns `s`.
  Status Count(Status s, CommOp op, uint64_t bytes);

  const std::string name_;
  CommStats stats_;
};

}  // namespace strata
