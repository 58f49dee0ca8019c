// zero3.cc: Zero3Sync.
#include "trainer/zero3.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "trainer/nn/tp_group.h"
#include "trainer/ops/ops.h"
#if STRATA_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "common/cuda_check.h"
#include "trainer/comm/nccl_communicator.h"
#endif

namespace strata {
namespace {

// Parameters of the built units, units from last to first (backward's order), each unit's in
// reverse creation order; `cut_before` starts a bucket at each unit's first.
std::vector<nn::Parameter*> BackwardOrder(const Model& model, std::vector<bool>* cut_before = nullptr,
                                          std::vector<int>* unit_of_position = nullptr) {
  std::vector<nn::Parameter*> out;
  for (int u = model.num_units() - 1; u >= 0; --u) {
    const std::vector<nn::Parameter*> ps = model.UnitParameters(u);
    for (size_t k = ps.size(); k-- > 0;) {
      if (cut_before) cut_before->push_back(k + 1 == ps.size());
      if (unit_of_position) unit_of_position->push_back(u);
      out.push_back(ps[k]);
    }
  }
  return out;
}

#if STRATA_HAVE_CUDA
void* NewEvent() {
  cudaEvent_t e;
  CUDA_CHECK_FATAL(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}
#endif

}  // namespace

Zero3Sync::Zero3Sync(Communicator& comm, Model& model, bool prefetch, Trace* trace, void* compute_stream)
    : comm_(comm),
      model_(model),
      exec_(model.exec()),
      prefetch_(prefetch),
      trace_(trace),
      // Buckets are cut at units only (no size limit).
      buckets_(model.exec(), BackwardOrder(model), SIZE_MAX, comm.size(), /*values=*/true) {
  std::vector<bool> cuts;
  std::vector<int> unit_of;
  const std::vector<nn::Parameter*> params = BackwardOrder(model, &cuts, &unit_of);
  STRATA_CHECK(model.params().params().size() == params.size())
      << "ZeRO-3: " << model.params().params().size() - params.size() << " parameters belong to no unit";
  // The layout follows the buckets' own parameter list, which is backward's order already.
  std::vector<size_t> order(params.size());
  for (size_t k = 0; k < order.size(); ++k) {
    order[k] = k;
    index_[params[k]] = k;
  }
  buckets_.Layout(order, cuts);
  bucket_of_unit_.assign(static_cast<size_t>(model.num_units()), -1);
  for (size_t k = 0; k < params.size(); ++k) {
    bucket_of_unit_[static_cast<size_t>(unit_of[k])] = static_cast<int>(buckets_.bucket_of(k));
    last_unit_ = std::max(last_unit_, unit_of[k]);
  }
  if (compute_stream) {
#if STRATA_HAVE_CUDA
    auto* nccl = dynamic_cast<NcclCommunicator*>(&comm_);
    STRATA_CHECK(nccl) << "device-mode ZeRO-3 needs a stream-ordered (NCCL) communicator";
    compute_stream_ = compute_stream;
    comm_stream_ = nccl->stream();
#else
    STRATA_CHECK(false) << "a compute stream without CUDA";
#endif
  } else {
    STRATA_CHECK(exec_.device.is_cpu()) << "ZeRO-3 on a device needs its communicator's stream";
  }
  state_.assign(buckets_.size(), Bucket{});
  const int64_t rank = comm_.rank();
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const GradBucket& b = buckets_[i];
    value_shards_.push_back(ops::NewTensor(exec_, {b.shard}));
    ops::Copy(exec_, b.value.Narrow(0, rank * b.shard, b.shard), value_shards_.back());
    grad_shards_.push_back(ops::NewZeros(exec_, {b.shard}));
    buckets_.ReleaseValues(i);
    buckets_.ReleaseGrads(i);
#if STRATA_HAVE_CUDA
    if (comm_stream_) {
      Bucket& s = state_[i];
      s.gather_start = NewEvent();
      s.gather_done = NewEvent();
      s.reduce_start = NewEvent();
      s.reduce_done = NewEvent();
    }
#endif
  }
  reported_.assign(params.size(), false);
  model_.set_unit_hooks(this);
  thread_ = std::thread([this] { Run(); });
}

Zero3Sync::~Zero3Sync() {
  model_.set_unit_hooks(nullptr);
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
#if STRATA_HAVE_CUDA
  // Bounded (NCCL aborts past its timeout); on failure the events stay rather than be
  // destroyed under a stream that may still wait for them.
  if (comm_stream_ && comm_.Synchronize().ok()) {
    for (Bucket& s : state_) {
      for (void* e : {s.gather_start, s.gather_done, s.reduce_start, s.reduce_done}) {
        cudaEventDestroy(static_cast<cudaEvent_t>(e));
      }
    }
  }
#endif
}

// ---------------------------------------------------------------------------------------------
// The communication thread

uint64_t Zero3Sync::Enqueue(Kind kind, size_t b) {
#if STRATA_HAVE_CUDA
  if (comm_stream_) {
    // What the collective reads or writes was last touched on the compute stream (the
    // optimizer's update of the shard, backward's gradient, a freed buffer's last reader).
    void* start = kind == Kind::kGather ? state_[b].gather_start : state_[b].reduce_start;
    CUDA_CHECK_FATAL(cudaEventRecord(static_cast<cudaEvent_t>(start), static_cast<cudaStream_t>(compute_stream_)));
  }
#endif
  std::lock_guard lock(mu_);
  const uint64_t seq = ++issued_;
  queue_.push_back({kind, b, seq, step_});
  cv_.notify_all();
  return seq;
}

void Zero3Sync::Run() {
#if STRATA_HAVE_CUDA
  if (comm_stream_) CUDA_CHECK_FATAL(cudaSetDevice(dynamic_cast<NcclCommunicator&>(comm_).device()));
#endif
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const Op op = queue_.front();
    queue_.pop_front();
    const bool failed = !error_.ok();
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    // After a failure the communicator is unusable: later ops complete without running.
    Status s = failed ? Status::OK() : Execute(op);
    const double secs = SecondsSince(start);
    lock.lock();
    (op.kind == Kind::kGather ? gather_seconds_ : reduce_seconds_) += secs;
    if (!s.ok() && error_.ok()) {
      error_ = s.WithContext((op.kind == Kind::kGather ? "ZeRO-3 all-gather of bucket " : "ZeRO-3 reduce-scatter of bucket ") +
                             std::to_string(op.bucket));
    }
    completed_ = op.seq;
    cv_.notify_all();
  }
}

Status Zero3Sync::Execute(const Op& op) {
  const GradBucket& b = buckets_[op.bucket];
  const Bucket& st = state_[op.bucket];
  const bool gather = op.kind == Kind::kGather;
  Trace::Scope scope(trace_, (gather ? "all-gather bucket " : "reduce-scatter bucket ") + std::to_string(op.bucket),
                     "comm", 1, op.step);
#if STRATA_HAVE_CUDA
  if (comm_stream_) {
    CUDA_CHECK_FATAL(cudaStreamWaitEvent(static_cast<cudaStream_t>(comm_stream_),
                                         static_cast<cudaEvent_t>(gather ? st.gather_start : st.reduce_start), 0));
  }
#endif
  Status s = gather ? comm_.AllGather(value_shards_[op.bucket].data_as<float>(), b.value.data_as<float>(),
                                      static_cast<size_t>(b.shard))
                    : comm_.ReduceScatter(b.grad.data_as<float>(), grad_shards_[op.bucket].data_as<float>(),
                                          static_cast<size_t>(b.shard), ReduceOp::kAvg);
#if STRATA_HAVE_CUDA
  if (comm_stream_ && s.ok()) {
    CUDA_CHECK_FATAL(cudaEventRecord(static_cast<cudaEvent_t>(gather ? st.gather_done : st.reduce_done),
                                     static_cast<cudaStream_t>(comm_stream_)));
  }
#else
  (void)st;
#endif
  return s;
}

Status Zero3Sync::Wait(uint64_t seq, void* done_event, double* exposed) {
  const auto start = std::chrono::steady_clock::now();
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return completed_ >= seq; });
    if (!error_.ok()) return error_;
  }
#if STRATA_HAVE_CUDA
  if (comm_stream_ && done_event) {
    CUDA_CHECK_FATAL(cudaStreamWaitEvent(static_cast<cudaStream_t>(compute_stream_),
                                         static_cast<cudaEvent_t>(done_event), 0));
  }
#else
  (void)done_event;
#endif
  if (exposed) *exposed += SecondsSince(start);
  return Status::OK();
}

void Zero3Sync::CommAfterCompute() {
#if STRATA_HAVE_CUDA
  if (!comm_stream_ || state_.empty()) return;
  // Any event of ours serves: record it on the compute stream, make the comm stream wait.
  CUDA_CHECK_FATAL(cudaEventRecord(static_cast<cudaEvent_t>(state_[0].gather_start),
                                   static_cast<cudaStream_t>(compute_stream_)));
  CUDA_CHECK_FATAL(cudaStreamWaitEvent(static_cast<cudaStream_t>(comm_stream_),
                                       static_cast<cudaEvent_t>(state_[0].gather_start), 0));
#endif
}

// ---------------------------------------------------------------------------------------------
// The training thread

void Zero3Sync::Gather(size_t b) {
  if (state_[b].gather != 0) return;
  buckets_.AllocateValues(b);
  state_[b].gather = Enqueue(Kind::kGather, b);
  ++gathers_;
}

void Zero3Sync::Reduce(size_t b) {
  if (state_[b].reduce != 0) return;
  buckets_.AllocateGrads(b);  // a unit whose backward never ran gives zeros
  state_[b].reduce = Enqueue(Kind::kReduce, b);
}

void Zero3Sync::ReleaseValues(size_t b) {
  if (state_[b].gather == 0) return;
  // The buffer goes when its gather has run: Wait first (errors surface in Finish).
  (void)Wait(state_[b].gather, state_[b].gather_done, nullptr);
  buckets_.ReleaseValues(b);
  state_[b].gather = 0;
}

void Zero3Sync::Reap() {
  uint64_t completed;
  {
    std::lock_guard lock(mu_);
    completed = completed_;
  }
  for (size_t b = 0; b < state_.size(); ++b) {
    Bucket& s = state_[b];
    if (s.reduce == 0 || s.reduce > completed || !buckets_[b].grad.defined()) continue;
#if STRATA_HAVE_CUDA
    // Whatever later takes the memory on the compute stream waits for the reduction.
    if (comm_stream_) {
      CUDA_CHECK_FATAL(cudaStreamWaitEvent(static_cast<cudaStream_t>(compute_stream_),
                                           static_cast<cudaEvent_t>(s.reduce_done), 0));
    }
#endif
    buckets_.ReleaseGrads(b);
  }
}

int Zero3Sync::NextBucketUnit(int unit, Pass pass, UnitRange walk) const {
  const int step = pass == Pass::kForward ? 1 : -1;
  for (int u = unit + step; walk.contains(u); u += step) {
    if (bucket_of_unit_[static_cast<size_t>(u)] >= 0) return u;
  }
  return -1;
}

void Zero3Sync::BeforeUnit(int unit, Pass pass, UnitRange walk, const nn::Context& /*ctx*/) {
  Reap();
  const int b = bucket_of_unit_[static_cast<size_t>(unit)];
  if (b >= 0) {
    if (pass == Pass::kBackward) buckets_.AllocateGrads(static_cast<size_t>(b));
    Gather(static_cast<size_t>(b));
  }
  if (prefetch_) {
    if (const int next = NextBucketUnit(unit, pass, walk); next >= 0) {
      Gather(static_cast<size_t>(bucket_of_unit_[static_cast<size_t>(next)]));
    }
  }
  if (b < 0) return;
  Trace::Scope scope(trace_, "wait for all-gather", "comm", 0, step_);
  const Bucket& s = state_[static_cast<size_t>(b)];
  Status st = Wait(s.gather, s.gather_done, &gather_exposed_);
  if (!st.ok()) throw nn::CollectiveFailed(st);
}

void Zero3Sync::AfterUnit(int unit, Pass pass, const nn::Context& ctx) {
  const int b = bucket_of_unit_[static_cast<size_t>(unit)];
  if (b < 0) return;
  // Backward starts with the last unit, right after its forward: its values stay.
  if (pass == Pass::kForward && ctx.training() && unit == last_unit_) return;
  ReleaseValues(static_cast<size_t>(b));
}

void Zero3Sync::BeginStep(int64_t step) {
  step_ = step;
  std::fill(reported_.begin(), reported_.end(), false);
  for (size_t i = 0; i < state_.size(); ++i) {
    state_[i].pending = buckets_[i].slots.size();
    state_[i].reduce = 0;
  }
  late_.clear();
  active_ = true;
}

void Zero3Sync::GradReady(nn::Parameter& p) {
  if (!active_ || !prefetch_) return;
  auto it = index_.find(&p);
  if (it == index_.end()) return;
  const size_t k = it->second;
  if (reported_[k]) {
    if (late_.empty()) late_ = p.name;
    return;
  }
  reported_[k] = true;
  const size_t b = buckets_.bucket_of(k);
  if (--state_[b].pending == 0) Reduce(b);
}

Status Zero3Sync::Finish(int64_t /*step*/) {
  active_ = false;
  for (size_t b = 0; b < state_.size(); ++b) Reduce(b);
  Status s;
  {
    Trace::Scope scope(trace_, "wait for reduce-scatter", "comm", 0, step_);
    s = Wait(issued_, nullptr, &reduce_exposed_);
  }
#if STRATA_HAVE_CUDA
  if (comm_stream_ && s.ok()) {
    for (const Bucket& st : state_) {
      CUDA_CHECK_FATAL(cudaStreamWaitEvent(static_cast<cudaStream_t>(compute_stream_),
                                           static_cast<cudaEvent_t>(st.reduce_done), 0));
    }
  }
#endif
  if (!s.ok()) return s;
  Reap();
  for (size_t b = 0; b < state_.size(); ++b) ReleaseValues(b);  // none is left gathered
  if (!late_.empty()) {
    return Status::FailedPrecondition("parameter " + late_ +
                                      " got gradient after it was reported ready (a shared "
                                      "parameter); set sync.overlap: false");
  }
  return Status::OK();
}

Status Zero3Sync::GatherAll() {
  for (size_t b = 0; b < state_.size(); ++b) Gather(b);
  Status s = Wait(issued_, nullptr, nullptr);
#if STRATA_HAVE_CUDA
  if (comm_stream_ && s.ok()) {
    for (const Bucket& st : state_) {
      CUDA_CHECK_FATAL(cudaStreamWaitEvent(static_cast<cudaStream_t>(compute_stream_),
                                           static_cast<cudaEvent_t>(st.gather_done), 0));
    }
  }
#endif
  return s.WithContext("gathering the ZeRO-3 parameters");
}

Status Zero3Sync::ReleaseAll(bool take) {
  const int64_t rank = comm_.rank();
  for (size_t b = 0; b < state_.size(); ++b) {
    if (take) {
      const GradBucket& g = buckets_[b];
      STRATA_CHECK(g.value.defined()) << "ZeRO-3: taking shards from bucket " << b << ", not gathered";
      ops::Copy(exec_, g.value.Narrow(0, rank * g.shard, g.shard), value_shards_[b]);
    }
    ReleaseValues(b);
  }
  std::lock_guard lock(mu_);
  return error_;
}

int64_t Zero3Sync::value_shard_bytes() const {
  int64_t n = 0;
  for (const Tensor& t : value_shards_) n += static_cast<int64_t>(t.nbytes());
  return n;
}

int64_t Zero3Sync::grad_shard_bytes() const {
  int64_t n = 0;
  for (const Tensor& t : grad_shards_) n += static_cast<int64_t>(t.nbytes());
  return n;
}

int64_t Zero3Sync::padded_floats() const {
  int64_t n = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) n += buckets_[i].padded;
  return n;
}

int64_t Zero3Sync::unit_padded_floats(int unit) const {
  const int b = bucket_of_unit_.at(static_cast<size_t>(unit));
  return b < 0 ? 0 : buckets_[static_cast<size_t>(b)].padded;
}

}  // namespace strata
