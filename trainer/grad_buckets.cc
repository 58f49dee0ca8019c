// grad_buckets.cc: GradBuckets.
#include "trainer/grad_buckets.h"

#include "common/check.h"
#include "trainer/ops/ops.h"

namespace strata {

GradBuckets::GradBuckets(ops::Exec exec, std::vector<nn::Parameter*> params, size_t bucket_bytes,
                         int shards, bool values)
    : exec_(exec), params_(std::move(params)), bucket_bytes_(bucket_bytes), shards_(shards), values_(values) {
  STRATA_CHECK(shards_ >= 1) << "shards " << shards_;
}

void GradBuckets::Point(GradBucket& b, const Tensor& buffer, bool grad, bool copy) {
  for (const BucketSlot& s : b.slots) {
    nn::Parameter& p = *params_[s.param];
    Tensor& t = grad ? p.grad : p.value;
    const Shape shape = p.value.defined() ? p.value.shape() : p.grad.shape();
    Result<Tensor> view_or = buffer.Narrow(0, s.offset, s.numel).Reshape(shape);
    STRATA_CHECK_OK(view_or.status());
    Tensor view = *view_or;
    if (copy && t.defined()) ops::Copy(exec_, t, view);
    t = view;
  }
}

void GradBuckets::Layout(const std::vector<size_t>& order) {
  STRATA_CHECK(order.size() == params_.size()) << "a bucket order of " << order.size() << " of "
                                               << params_.size() << " parameters";
  // Drop the old buffers' handles first: each old buffer is then held only by the views of its
  // parameters, and goes as soon as the last of them is re-pointed below, so a re-layout needs
  // about one bucket more than the buffers themselves, not a second copy of them all.
  for (GradBucket& b : buckets_) {
    b.grad = Tensor();
    b.value = Tensor();
  }
  std::vector<GradBucket> buckets;
  bucket_of_.assign(params_.size(), 0);
  for (size_t k : order) {
    const int64_t n = params_[k]->value.numel();
    if (buckets.empty() || (!buckets.back().slots.empty() &&
                            static_cast<size_t>(buckets.back().floats + n) * sizeof(float) > bucket_bytes_)) {
      buckets.emplace_back();
    }
    GradBucket& b = buckets.back();
    b.slots.push_back({k, b.floats, n});
    b.floats += n;
    bucket_of_[k] = buckets.size() - 1;
  }
  for (GradBucket& b : buckets) {
    b.padded = (b.floats + shards_ - 1) / shards_ * shards_;
    b.shard = b.padded / shards_;
    if (grads_allocated_) {
      b.grad = ops::NewZeros(exec_, {b.padded});
      Point(b, b.grad, /*grad=*/true, /*copy=*/true);
    }
    if (values_) {
      b.value = ops::NewZeros(exec_, {b.padded});
      Point(b, b.value, /*grad=*/false, /*copy=*/true);
    }
  }
  buckets_ = std::move(buckets);
  ++generation_;
}

void GradBuckets::ReleaseGrads() {
  for (GradBucket& b : buckets_) {
    for (const BucketSlot& s : b.slots) params_[s.param]->grad = Tensor();
    b.grad = Tensor();
  }
  grads_allocated_ = false;
}

void GradBuckets::AllocateGrads() {
  if (grads_allocated_) return;
  for (GradBucket& b : buckets_) {
    b.grad = ops::NewZeros(exec_, {b.padded});
    Point(b, b.grad, /*grad=*/true, /*copy=*/false);
  }
  grads_allocated_ = true;
}

int64_t GradBuckets::grad_bytes() const {
  int64_t n = 0;
  for (const GradBucket& b : buckets_) n += b.grad.defined() ? b.padded : 0;
  return n * static_cast<int64_t>(sizeof(float));
}

int64_t GradBuckets::value_bytes() const {
  int64_t n = 0;
  for (const GradBucket& b : buckets_) n += b.value.defined() ? b.padded : 0;
  return n * static_cast<int64_t>(sizeof(float));
}

}  // namespace strata
