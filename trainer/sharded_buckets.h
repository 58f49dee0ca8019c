// sharded_buckets.h: ShardedBuckets, what a ZeRO optimizer (ShardedOptimizer) updates: gradient
// buckets of which data-parallel rank r owns the r-th contiguous 1/dp, with that slice's
// averaged gradient and its values. BucketAllReducer (ZeRO-1/2: values whole on every rank,
// all-gathered after the update) and Zero3Sync (values kept as shards, gathered per unit as it
// computes) provide it.
#pragma once

#include <cstddef>

#include "common/tensor.h"
#include "trainer/comm/communicator.h"
#include "trainer/grad_buckets.h"

namespace strata {

class ShardedBuckets {
 public:
  virtual ~ShardedBuckets() = default;
  virtual GradBuckets& buckets() = 0;
  virtual Communicator& comm() = 0;  // the data-parallel group
  virtual int zero() const = 0;      // the ZeRO stage
  // This rank's averaged slice of bucket i's gradient ([shard] floats), after the step's sync.
  virtual const Tensor& grad_shard(size_t i) const = 0;
  // This rank's slice of bucket i's values ([shard] floats): what its optimizer step writes.
  virtual Tensor value_shard(size_t i) = 0;
  // Device mode: orders the communicator's stream after the compute stream's work so far.
  virtual void CommAfterCompute() = 0;
};

}  // namespace strata
