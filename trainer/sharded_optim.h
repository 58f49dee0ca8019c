// sharded_optim.h: ShardedOptimizer, the optimizer of ZeRO-1 and ZeRO-2: each data-parallel
// rank keeps the state (AdamW m and v, SGD momentum) of its own slice of every gradient bucket
// only, and updates that slice of the parameters from its reduced gradient shard.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "trainer/sharded_buckets.h"
#include "trainer/optim.h"

namespace strata {

// Updates, per element, exactly what the replicated optimizer updates (the same ops on slices
// of the same values), honouring each parameter's weight_decay where a slice crosses several
// parameters. The parameters' values must then be all-gathered
// (BucketAllReducer::AllGatherParams; under ZeRO-3 the next forward gathers them).
//
// Checkpoints see whole per-parameter state, as the replicated optimizer's: GatherState()
// (collective over the dp group) assembles it, State() returns it; after a checkpoint is
// loaded into State()'s tensors, StateLoaded() has the next Step() take each rank's slices
// from them. So a checkpoint is the same under any ZeRO stage and dp size.
//
// The buckets must not be re-laid once the optimizer holds state (BucketAllReducer re-lays
// them once, in the first step's Finish, before the first Step()). Not thread-safe.
// Under ZeRO-3 (Zero3Sync) the values it writes are the shards the next forward gathers.
class ShardedOptimizer final : public Optimizer {
 public:
  ShardedOptimizer(const OptimizerOptions& o, ShardedBuckets& reducer);

  void Step(double lr) override;
  std::vector<std::pair<std::string, Tensor>> State() override;
  Status GatherState() override;
  void ReleaseGatheredState() override;
  void StateLoaded() override;

  // Clipping on shards: the sum of squares of this rank's gradient slices (each element of
  // the model on exactly one dp rank), of tensor-parallel shards' gradients only (`split`) or
  // of the others; and scaling of the slices. Before the first Step they lay the state out
  // (the buckets are final once the first step's gradients are reduced).
  double GradSquaredSum(bool split);
  void ScaleGrads(float scale);
  // Bytes of optimizer state this rank holds (its slices).
  int64_t state_bytes() const;

 private:
  // A run of one parameter's elements inside this rank's slice of a bucket.
  struct Segment {
    size_t bucket;
    size_t param;
    int64_t begin;   // in the bucket
    int64_t length;
    int64_t param_offset;  // of `begin` within the parameter
  };
  size_t num_states() const { return sgd_ ? 1 : 2; }
  // (Re)makes the segments and per-bucket state for the current layout: from the loaded whole
  // state if any, else zeros.
  void Prepare();
  Tensor Slice(size_t state, const Segment& s) const;  // of states_[state][bucket]
  Tensor GradSlice(const Segment& s) const;

  OptimizerOptions o_;
  ShardedBuckets& reducer_;
  const bool sgd_;
  int64_t generation_ = -1;       // of the layout the state follows
  std::vector<Segment> segments_;
  std::vector<std::vector<Tensor>> states_;  // [state][bucket]: [shard] floats
  std::vector<std::vector<Tensor>> whole_;   // [state][param]: shaped as the parameter
  bool loaded_ = false;           // whole_ holds a loaded checkpoint not yet sliced
};

}  // namespace strata
