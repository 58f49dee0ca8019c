// sharded_optim.cc: ShardedOptimizer.
#include "trainer/sharded_optim.h"

#include <algorithm>

#include "trainer/ops/ops.h"

namespace strata {

ShardedOptimizer::ShardedOptimizer(const OptimizerOptions& o, ShardedBuckets& reducer)
    : o_(o), reducer_(reducer), sgd_(o.kind == OptimizerOptions::Kind::kSgd) {
  STRATA_CHECK(reducer.zero() > 0) << "a sharded optimizer over an all-reduce";
}

void ShardedOptimizer::Prepare() {
  GradBuckets& buckets = reducer_.buckets();
  if (generation_ == buckets.generation()) return;
  STRATA_CHECK(generation_ < 0 || step_ == 0 || loaded_)
      << "the gradient buckets were re-laid under optimizer state";
  generation_ = buckets.generation();
  const int64_t rank = reducer_.comm().rank();
  const ops::Exec& exec = buckets.exec();
  segments_.clear();
  states_.assign(num_states(), {});
  for (size_t i = 0; i < buckets.size(); ++i) {
    const GradBucket& b = buckets[i];
    const int64_t lo = rank * b.shard, hi = lo + b.shard;
    for (const BucketSlot& s : b.slots) {
      const int64_t begin = std::max(lo, s.offset), end = std::min(hi, s.offset + s.numel);
      if (begin < end) segments_.push_back({i, s.param, begin, end - begin, begin - s.offset});
    }
    for (auto& st : states_) st.push_back(ops::NewZeros(exec, {b.shard}));
  }
  if (loaded_) {
    for (size_t k = 0; k < num_states(); ++k) {
      for (const Segment& s : segments_) {
        Tensor whole = *whole_[k][s.param].Reshape({-1});
        ops::Copy(exec, whole.Narrow(0, s.param_offset, s.length), Slice(k, s));
      }
    }
    loaded_ = false;
    ReleaseGatheredState();
  }
}

Tensor ShardedOptimizer::Slice(size_t state, const Segment& s) const {
  const GradBucket& b = reducer_.buckets()[s.bucket];
  const int64_t lo = reducer_.comm().rank() * b.shard;
  return states_[state][s.bucket].Narrow(0, s.begin - lo, s.length);
}

Tensor ShardedOptimizer::GradSlice(const Segment& s) const {
  const GradBucket& b = reducer_.buckets()[s.bucket];
  const int64_t lo = reducer_.comm().rank() * b.shard;
  return reducer_.grad_shard(s.bucket).Narrow(0, s.begin - lo, s.length);
}

void ShardedOptimizer::Step(double lr) {
  Prepare();
  ++step_;
  GradBuckets& buckets = reducer_.buckets();
  const ops::Exec& exec = buckets.exec();
  for (const Segment& s : segments_) {
    const nn::Parameter& p = *buckets.params()[s.param];
    const float wd = p.weight_decay ? static_cast<float>(o_.weight_decay) : 0.0f;
    const int64_t lo = reducer_.comm().rank() * buckets[s.bucket].shard;
    const Tensor w = reducer_.value_shard(s.bucket).Narrow(0, s.begin - lo, s.length);
    if (sgd_) {
      ops::SgdUpdate(exec, w, GradSlice(s), Slice(0, s), static_cast<float>(lr), static_cast<float>(o_.momentum), wd,
                     o_.nesterov);
    } else {
      ops::AdamWUpdate(exec, w, GradSlice(s), Slice(0, s), Slice(1, s), static_cast<float>(lr),
                       static_cast<float>(o_.beta1), static_cast<float>(o_.beta2), static_cast<float>(o_.eps), wd,
                       step_);
    }
  }
}

double ShardedOptimizer::GradSquaredSum(bool split) {
  Prepare();  // clipping comes before the first Step
  double sq = 0;
  const GradBuckets& buckets = reducer_.buckets();
  for (const Segment& s : segments_) {
    if (buckets.params()[s.param]->shard.whole() != split) sq += ops::SumSquares(buckets.exec(), GradSlice(s));
  }
  return sq;
}

void ShardedOptimizer::ScaleGrads(float scale) {
  Prepare();
  for (size_t i = 0; i < reducer_.buckets().size(); ++i) ops::Scale(reducer_.buckets().exec(), reducer_.grad_shard(i), scale);
}

int64_t ShardedOptimizer::state_bytes() const {
  int64_t n = 0;
  for (const auto& st : states_) {
    for (const Tensor& t : st) n += static_cast<int64_t>(t.nbytes());
  }
  return n;
}

std::vector<std::pair<std::string, Tensor>> ShardedOptimizer::State() {
  const GradBuckets& buckets = reducer_.buckets();
  const auto& params = buckets.params();
  if (whole_.empty()) {
    whole_.assign(num_states(), {});
    for (auto& w : whole_) {
      for (const nn::Parameter* p : params) w.push_back(ops::NewZeros(buckets.exec(), p->shard.LocalShape()));
    }
  }
  std::vector<std::pair<std::string, Tensor>> s;
  for (size_t i = 0; i < params.size(); ++i) {
    if (sgd_) {
      s.emplace_back("sgd.v/" + params[i]->name, whole_[0][i]);
    } else {
      s.emplace_back("adamw.m/" + params[i]->name, whole_[0][i]);
      s.emplace_back("adamw.v/" + params[i]->name, whole_[1][i]);
    }
  }
  return s;
}

Status ShardedOptimizer::GatherState() {
  State();  // the whole tensors
  if (generation_ < 0 || loaded_) return Status::OK();  // no step yet: zeros, or as loaded
  GradBuckets& buckets = reducer_.buckets();
  const ops::Exec& exec = buckets.exec();
  Communicator& comm = reducer_.comm();
  reducer_.CommAfterCompute();  // the optimizer's last updates of the state (device mode)
  for (size_t k = 0; k < num_states(); ++k) {
    for (size_t i = 0; i < buckets.size(); ++i) {
      const GradBucket& b = buckets[i];
      Tensor all = ops::NewTensor(exec, {b.padded});
      // Host memory for Gloo; device memory for NCCL, waited for before the copies below.
      STRATA_RETURN_IF_ERROR(comm.AllGather(states_[k][i].data_as<float>(), all.data_as<float>(),
                                            static_cast<size_t>(b.shard))
                                 .WithContext("gathering the optimizer state of bucket " + std::to_string(i)));
      STRATA_RETURN_IF_ERROR(comm.Synchronize());
      for (const BucketSlot& s : b.slots) {
        ops::Copy(exec, all.Narrow(0, s.offset, s.numel), *whole_[k][s.param].Reshape({-1}));
      }
    }
  }
  return Status::OK();
}

void ShardedOptimizer::ReleaseGatheredState() {
  if (!loaded_) whole_.clear();
}

void ShardedOptimizer::StateLoaded() {
  loaded_ = true;
  generation_ = -1;  // the next Step slices the loaded state
}

}  // namespace strata
