// communicator.h: Communicator, the collectives trainers synchronise with when they do not go
// through the parameter servers: all-reduce, all-gather, broadcast and barrier over a group of
// ranks. Backends: Gloo over TCP for CPU tensors (gloo_communicator.h); NCCL for GPUs to come.
// Every backend is bootstrapped through the scheduler's key-value store, so no extra rendezvous
// service is needed.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/mesh.h"
#include "common/status.h"

namespace strata {

// Not thread-safe: one thread issues a communicator's collectives, in the same order on every
// rank of its group (as with MPI, Gloo and NCCL).
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: every rank ends with the element-wise reduction of every rank's `data`.
  // kAvg divides the sum by size().
  virtual Status AllReduce(float* data, size_t count, ReduceOp op) = 0;
  // `out` (size() * count floats) gets every rank's `in` (count floats), in rank order.
  virtual Status AllGather(const float* in, float* out, size_t count) = 0;
  // Every rank ends with `root`'s `data`.
  virtual Status Broadcast(float* data, size_t count, int root) = 0;
  virtual Status Barrier() = 0;
};

}  // namespace strata
