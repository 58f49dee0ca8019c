// grad_sync_zero.cc: BucketAllReducer's ZeRO-1/2 parameter side: the all-gather of the updated
// values after the optimizer step, queued on the communication thread and waited for unit by
// unit in the next forward (UnitHooks), and ZeRO-2's gradient buffers made per unit.
#include <algorithm>
#include <chrono>

#include "trainer/grad_sync.h"
#include "trainer/nn/tp_group.h"
#include "trainer/ops/ops.h"

namespace strata {

void BucketAllReducer::SetUnits(const Model& model) {
  STRATA_CHECK(zero_ > 0 && !comm_stream_ && exec_.device.is_cpu()) << "unit hooks: ZeRO with host tensors only";
  unit_params_.assign(static_cast<size_t>(model.num_units()), {});
  for (int u = 0; u < model.num_units(); ++u) {
    for (nn::Parameter* p : model.UnitParameters(u)) {
      auto it = index_.find(p);
      if (it != index_.end()) unit_params_[static_cast<size_t>(u)].push_back(it->second);
    }
  }
  std::lock_guard lock(mu_);
  lazy_grads_ = zero_ >= 2;
  gathered_.assign(buckets_.size(), true);
}

void BucketAllReducer::BeforeUnit(int unit, Pass pass, UnitRange /*walk*/, const nn::Context& /*ctx*/) {
  const std::vector<size_t>& params = unit_params_.at(static_cast<size_t>(unit));
  if (pass == Pass::kBackward) {
    if (!lazy_grads_) return;
    std::lock_guard lock(mu_);
    for (size_t k : params) buckets_.AllocateGrads(buckets_.bucket_of(k));
    return;
  }
  std::unique_lock lock(mu_);
  auto ready = [&] {
    return !gather_error_.ok() ||
           std::ranges::all_of(params, [&](size_t k) { return static_cast<bool>(gathered_[buckets_.bucket_of(k)]); });
  };
  if (!ready()) {
    Trace::Scope scope(trace_, "wait for all-gather", "comm", 0, step_);
    const auto start = std::chrono::steady_clock::now();
    cv_.wait(lock, ready);
    gather_exposed_ += SecondsSince(start);
  }
  if (!gather_error_.ok()) throw nn::CollectiveFailed(gather_error_);
}

Status BucketAllReducer::GatherBucket(size_t i) {
  Trace::Scope scope(trace_, "all-gather bucket " + std::to_string(i), "comm", 1, step_);
  return GatherValues(i);
}

Status BucketAllReducer::GatherValues(size_t i) {
  const GradBucket& b = buckets_[i];
  if (shards_in_buckets_) {  // in place: the updated slice is this rank's block of the values
    return comm_.AllGather(b.value.data_as<float>() + comm_.rank() * b.shard, b.value.data_as<float>(),
                           static_cast<size_t>(b.shard));
  }
  return comm_.AllGather(grad_shards_[i].data_as<float>(), b.value.data_as<float>(), static_cast<size_t>(b.shard));
}

Status BucketAllReducer::WaitAllParams() {
  std::unique_lock lock(mu_);
  const auto start = std::chrono::steady_clock::now();
  cv_.wait(lock, [&] { return gather_next_ >= gather_order_.size(); });
  gather_exposed_ += SecondsSince(start);
  return gather_error_;
}

Status BucketAllReducer::AllGatherParams() {
  if (zero_ == 0) return Status::OK();
  STRATA_RETURN_IF_ERROR(WaitAllParams());  // the previous step's, if any is left
  Trace::Scope scope(trace_, "all-gather parameters", "comm", 0, step_);
  const int64_t rank = comm_.rank();
  // The updated slice goes through the gradient shard (no longer needed this step): Gloo's
  // all-gather wants an input apart from its output.
  for (size_t i = 0; i < buckets_.size() && !shards_in_buckets_; ++i) {
    const GradBucket& b = buckets_[i];
    ops::Copy(exec_, b.value.Narrow(0, rank * b.shard, b.shard), grad_shards_[i]);
  }
  if (!unit_params_.empty()) {
    // Buckets follow backward's order, so the last holds the first units: queued from it.
    std::lock_guard lock(mu_);
    gather_order_.clear();
    for (size_t i = buckets_.size(); i-- > 0;) gather_order_.push_back(i);
    gather_next_ = 0;
    gathered_.assign(buckets_.size(), false);
    cv_.notify_all();
    return Status::OK();
  }
  // The synchronous gather is exposed whole.
  const auto start = std::chrono::steady_clock::now();
  const Status s = GatherAllNow();
  gather_seconds_ += SecondsSince(start);
  gather_exposed_ += SecondsSince(start);
  return s;
}

Status BucketAllReducer::GatherAllNow() {
  CommWaitsForCompute(start_event_);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const GradBucket& b = buckets_[i];
    if (b.value.is_cpu() || comm_stream_) {
      STRATA_RETURN_IF_ERROR(GatherValues(i).WithContext("all-gather of bucket " + std::to_string(i)));
      continue;
    }
    std::vector<float> shard(static_cast<size_t>(b.shard)), all(static_cast<size_t>(b.padded));
    STRATA_RETURN_IF_ERROR(Tensor::HostView(shard.data(), grad_shards_[i]).CopyFrom(grad_shards_[i]));
    STRATA_RETURN_IF_ERROR(comm_.AllGather(shard.data(), all.data(), shard.size()));
    Tensor v = b.value;
    STRATA_RETURN_IF_ERROR(v.CopyFrom(Tensor::HostView(all.data(), b.value)));
  }
  ComputeWaitsForComm();
  return Status::OK();
}

}  // namespace strata
