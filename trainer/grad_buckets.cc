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
    Result<Tensor> view_or = buffer.Narrow(0, s.offset, s.numel).Reshape(s.shape);
    STRATA_CHECK_OK(view_or.status());
    Tensor view = *view_or;
    if (copy && t.defined()) ops::Copy(exec_, t, view);
    t = view;
  }
}

void GradBuckets::Layout(const std::vector<size_t>& order, const std::vector<bool>& cut_before) {
  STRATA_CHECK(order.size() == params_.size()) << "a bucket order of " << order.size() << " of "
                                               << params_.size() << " parameters";
  STRATA_CHECK(cut_before.empty() || cut_before.size() == order.size()) << "cuts for " << cut_before.size();
  // What is allocated now stays so (the first layout: everything).
  const bool first = buckets_.empty();
  const bool grads = first || grads_allocated();
  const bool values = values_ && (first || buckets_.front().value.defined());
  // Drop the old buffers' handles first: each old buffer is then held only by the views of its
  // parameters, and goes as soon as the last of them is re-pointed below, so a re-layout needs
  // about one bucket more than the buffers themselves, not a second copy of them all.
  for (GradBucket& b : buckets_) {
    b.grad = Tensor();
    b.value = Tensor();
  }
  std::vector<GradBucket> buckets;
  bucket_of_.assign(params_.size(), 0);
  for (size_t pos = 0; pos < order.size(); ++pos) {
    const size_t k = order[pos];
    const Shape shape = params_[k]->shard.LocalShape();
    const int64_t n = *ShapeNumel(shape);
    const bool cut = !cut_before.empty() && cut_before[pos];
    if (buckets.empty() || (!buckets.back().slots.empty() &&
                            (cut || static_cast<size_t>(buckets.back().floats + n) * sizeof(float) > bucket_bytes_))) {
      buckets.emplace_back();
    }
    GradBucket& b = buckets.back();
    b.slots.push_back({k, b.floats, n, shape});
    b.floats += n;
    bucket_of_[k] = buckets.size() - 1;
  }
  for (GradBucket& b : buckets) {
    b.padded = (b.floats + shards_ - 1) / shards_ * shards_;
    b.shard = b.padded / shards_;
    if (grads) {
      b.grad = ops::NewZeros(exec_, {b.padded});
      Point(b, b.grad, /*grad=*/true, /*copy=*/true);
    }
    if (values) {
      b.value = ops::NewZeros(exec_, {b.padded});
      Point(b, b.value, /*grad=*/false, /*copy=*/true);
    }
  }
  buckets_ = std::move(buckets);
  ++generation_;
}

void GradBuckets::ReleaseGrads() {
  for (size_t i = 0; i < buckets_.size(); ++i) ReleaseGrads(i);
}

void GradBuckets::AllocateGrads() {
  for (size_t i = 0; i < buckets_.size(); ++i) AllocateGrads(i);
}

void GradBuckets::ReleaseGrads(size_t bucket) {
  GradBucket& b = buckets_.at(bucket);
  for (const BucketSlot& s : b.slots) params_[s.param]->grad = Tensor();
  b.grad = Tensor();
}

void GradBuckets::AllocateGrads(size_t bucket) {
  GradBucket& b = buckets_.at(bucket);
  if (b.grad.defined()) return;
  b.grad = ops::NewZeros(exec_, {b.padded});
  Point(b, b.grad, /*grad=*/true, /*copy=*/false);
}

void GradBuckets::ReleaseValues(size_t bucket) {
  GradBucket& b = buckets_.at(bucket);
  for (const BucketSlot& s : b.slots) params_[s.param]->value = Tensor();
  b.value = Tensor();
}

void GradBuckets::AllocateValues(size_t bucket) {
  STRATA_CHECK(values_) << "values in buckets were not asked for";
  GradBucket& b = buckets_.at(bucket);
  if (b.value.defined()) return;
  b.value = ops::NewTensor(exec_, {b.padded});
  // The padding is part of the all-gather's output, so it is written too.
  Point(b, b.value, /*grad=*/false, /*copy=*/false);
}

bool GradBuckets::grads_allocated() const {
  for (const GradBucket& b : buckets_) {
    if (!b.grad.defined()) return false;
  }
  return true;
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
