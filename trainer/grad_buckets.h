// grad_buckets.h: GradBuckets, the contiguous per-bucket buffers data parallelism communicates
// in place: every parameter's gradient (and, for ZeRO, its value) is a view into its bucket's
// buffer, so a bucket is all-reduced or reduce-scattered with no packing copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/tensor.h"
#include "trainer/nn/module.h"
#include "trainer/ops/exec.h"

namespace strata {

// One parameter's place in its bucket.
struct BucketSlot {
  size_t param = 0;     // index into GradBuckets::params()
  int64_t offset = 0;   // first element in the bucket
  int64_t numel = 0;
  Shape shape;          // the parameter's (its tensors may be released: ZeRO-2 grads, ZeRO-3 values)
};

struct GradBucket {
  std::vector<BucketSlot> slots;  // in the order backward finishes them
  int64_t floats = 0;             // the parameters' elements
  int64_t padded = 0;             // floats rounded up to a multiple of the shard count
  int64_t shard = 0;              // padded / shards: what each data-parallel rank owns
  // [padded] floats; the parameters' gradients view [offset, offset + numel). Undefined while
  // released (ZeRO-2 between steps). The padding stays zero.
  Tensor grad;
  // [padded] floats the parameters' values view, when GradBuckets holds values; else undefined.
  Tensor value;
};

// Owns the bucket buffers of one set of parameters on one device and points the parameters'
// `grad` (and `value`) at them. Used by the one thread that trains (and, for the bytes only,
// the communication thread of BucketAllReducer, which never changes the layout).
class GradBuckets {
 public:
  // Buckets hold up to `bucket_bytes` of gradients (a larger one gets a bucket of its own) and
  // are padded to a multiple of `shards` floats (the data-parallel ranks under ZeRO; 1 else).
  // With `values`, the parameters' values move into bucket buffers too.
  GradBuckets(ops::Exec exec, std::vector<nn::Parameter*> params, size_t bucket_bytes, int shards,
              bool values);
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  // Cuts the buckets in `order` (parameter indices, each once): new buffers, the current
  // gradients and values copied into them, the parameters re-pointed. Bumps generation().
  // A bucket also starts at every position p of `order` with cut_before[p] (when given):
  // ZeRO-3 cuts one bucket per model unit. Released buffers stay released (no copy).
  void Layout(const std::vector<size_t>& order, const std::vector<bool>& cut_before = {});
  // ZeRO-2: drops the gradient buffers (the parameters' grads become undefined) ...
  void ReleaseGrads();
  // ... and makes zeroed ones again (the parameters re-pointed). No-op when allocated.
  void AllocateGrads();
  // The same for one bucket (ZeRO-3: a unit's gradients exist from its first backward of the
  // step until they are reduce-scattered).
  void ReleaseGrads(size_t bucket);
  void AllocateGrads(size_t bucket);
  // ZeRO-3: a bucket's full values exist only while its unit computes. Release drops the
  // buffer (the parameters' values become undefined); Allocate makes an uninitialised one
  // (filled by the caller's all-gather) and re-points the parameters.
  void ReleaseValues(size_t bucket);
  void AllocateValues(size_t bucket);
  bool grads_allocated() const;

  size_t size() const { return buckets_.size(); }
  GradBucket& operator[](size_t i) { return buckets_[i]; }
  const GradBucket& operator[](size_t i) const { return buckets_[i]; }
  size_t bucket_of(size_t param) const { return bucket_of_[param]; }
  const std::vector<nn::Parameter*>& params() const { return params_; }
  int shards() const { return shards_; }
  bool holds_values() const { return values_; }
  const ops::Exec& exec() const { return exec_; }
  int64_t generation() const { return generation_; }
  // Bytes of the gradient (value) buffers, padding included, as laid out now.
  int64_t grad_bytes() const;
  int64_t value_bytes() const;

 private:
  // Points every parameter of `b` at its slice of `buffer` (grad or value), copying the
  // parameter's current tensor into the slice when `copy` and it is defined.
  void Point(GradBucket& b, const Tensor& buffer, bool grad, bool copy);

  ops::Exec exec_;
  std::vector<nn::Parameter*> params_;
  size_t bucket_bytes_;
  int shards_;
  bool values_;
  std::vector<GradBucket> buckets_;
  std::vector<size_t> bucket_of_;  // by parameter index
  int64_t generation_ = 0;
};

}  // namespace strata
