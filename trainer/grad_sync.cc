// grad_sync.cc: BucketAllReducer.
#include "trainer/grad_sync.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <spdlog/spdlog.h>

#include "trainer/ops/ops.h"
#if STRATA_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "common/cuda_check.h"
#include "trainer/comm/nccl_communicator.h"
#endif

namespace strata {

// ---------------------------------------------------------------------------------------------
// BucketAllReducer

BucketAllReducer::BucketAllReducer(Communicator& comm, std::vector<nn::Parameter*> params,
                                   const ops::Exec& exec, size_t bucket_bytes, bool overlap, int zero,
                                   Trace* trace, void* compute_stream)
    : comm_(comm),
      exec_(exec),
      zero_(zero),
      buckets_(exec, std::move(params), bucket_bytes, zero > 0 ? comm.size() : 1, /*values=*/zero > 0),
      overlap_(overlap),
      trace_(trace) {
  if (compute_stream) {
#if STRATA_HAVE_CUDA
    auto* nccl = dynamic_cast<NcclCommunicator*>(&comm_);
    STRATA_CHECK(nccl) << "device-mode all-reduce needs a stream-ordered (NCCL) communicator";
    compute_stream_ = compute_stream;
    comm_stream_ = nccl->stream();
    cudaEvent_t done, start;
    CUDA_CHECK_FATAL(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CUDA_CHECK_FATAL(cudaEventCreateWithFlags(&start, cudaEventDisableTiming));
    done_event_ = done;
    start_event_ = start;
#else
    STRATA_CHECK(false) << "a compute stream without CUDA";
#endif
  }
  const auto& ps = buckets_.params();
  // Until a step has shown the order backward finishes gradients in, guess reverse creation.
  std::vector<size_t> order;
  for (size_t k = ps.size(); k-- > 0;) order.push_back(k);
  for (size_t k = 0; k < ps.size(); ++k) index_[ps[k]] = k;
  Layout(order);
  first_padded_floats_ = padded_floats();
  reported_.assign(ps.size(), false);
  thread_ = std::thread([this] { Run(); });
}

void BucketAllReducer::Layout(const std::vector<size_t>& order) {
  FreeEvents();
  // The shards go first: under ZeRO-1 they are views that would keep the old buffers alive
  // through the re-layout (Rebuild reduces again into the new ones).
  grad_shards_.clear();
  buckets_.Layout(order);
  sync_.assign(buckets_.size(), Sync{});
  grad_shards_.clear();
  // ZeRO-1 with host gradients: the full buffers live on, so a rank's reduced slice lives in
  // its own slice of them (reduce-scattered and the values all-gathered in place): 4 + 4 + 8/N
  // bytes a parameter for AdamW, the seeds' figure, not 4/N more.
  shards_in_buckets_ = zero_ == 1 && !comm_stream_ && exec_.device.is_cpu();
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const GradBucket& b = buckets_[i];
    if (shards_in_buckets_) {
      grad_shards_.push_back(b.grad.Narrow(0, comm_.rank() * b.shard, b.shard));
    } else if (zero_ > 0) {
      grad_shards_.push_back(ops::NewZeros(exec_, {b.shard}));
    }
#if STRATA_HAVE_CUDA
    if (comm_stream_) {
      cudaEvent_t e;
      CUDA_CHECK_FATAL(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      sync_[i].ready_event = e;
    }
#endif
  }
  ready_.assign(buckets_.size(), false);
}

int64_t BucketAllReducer::grad_shard_bytes() const {
  if (shards_in_buckets_) return 0;  // the shards are views of the buckets
  int64_t n = 0;
  for (const Tensor& t : grad_shards_) n += static_cast<int64_t>(t.nbytes());
  return n;
}

int64_t BucketAllReducer::padded_floats() const {
  int64_t n = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) n += buckets_[i].padded;
  return n;
}

Status BucketAllReducer::Rebuild() {
  // The order this step's backward reported gradients in (then any it did not report), taken
  // from rank 0 so that every rank builds the same buckets whatever happened locally.
  const size_t n = buckets_.params().size();
  std::vector<size_t> order = reported_order_;
  std::vector<bool> seen(n, false);
  for (size_t k : order) seen[k] = true;
  for (size_t k = n; k-- > 0;) {
    if (!seen[k]) order.push_back(k);
  }
  std::vector<float> wire(order.begin(), order.end());  // exact: fewer than 2^24 parameters
  STRATA_RETURN_IF_ERROR(comm_.BroadcastHost(wire.data(), wire.size(), 0).WithContext("sharing the bucket order"));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<size_t>(wire[i]);
  {
    // The new buffers take the gradients as they are: averaged (all-reduce), or this rank's
    // own sums (ZeRO: the reduce-scatter left its input alone), which are reduced again below
    // in the new layout, once, on this thread (the communication thread is idle).
    std::lock_guard lock(mu_);
    Layout(order);
  }
  if (zero_ > 0) {
    CommWaitsForCompute(start_event_);
    for (size_t i = 0; i < buckets_.size(); ++i) {
      STRATA_RETURN_IF_ERROR(Reduce(i).WithContext("reduce-scatter of bucket " + std::to_string(i)));
    }
    ComputeWaitsForComm();
  }
  return Status::OK();
}

BucketAllReducer::~BucketAllReducer() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  FreeEvents();
#if STRATA_HAVE_CUDA
  if (done_event_) cudaEventDestroy(static_cast<cudaEvent_t>(done_event_));
  if (start_event_) cudaEventDestroy(static_cast<cudaEvent_t>(start_event_));
#endif
}

void BucketAllReducer::FreeEvents() {
#if STRATA_HAVE_CUDA
  if (comm_stream_ && !sync_.empty() && !comm_.Synchronize().ok()) {
    // The communicator's Synchronize is bounded (past its timeout it aborts NCCL, releasing
    // kernels that wait for a dead peer), where cudaStreamSynchronize would wait forever. When
    // it fails, the events are left alive rather than destroyed under a waiting stream.
    for (Sync& b : sync_) b.ready_event = nullptr;
    return;
  }
  for (Sync& b : sync_) {
    if (b.ready_event) cudaEventDestroy(static_cast<cudaEvent_t>(b.ready_event));
    b.ready_event = nullptr;
  }
#endif
}

void BucketAllReducer::CommWaitsForCompute(void* event) {
#if STRATA_HAVE_CUDA
  if (!comm_stream_) return;
  CUDA_CHECK_FATAL(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(compute_stream_)));
  CUDA_CHECK_FATAL(cudaStreamWaitEvent(static_cast<cudaStream_t>(comm_stream_), static_cast<cudaEvent_t>(event), 0));
#else
  (void)event;
#endif
}

void BucketAllReducer::ComputeWaitsForComm() {
#if STRATA_HAVE_CUDA
  if (!comm_stream_) return;
  // Later compute (the optimizer, the next forward) waits for the collectives on the device,
  // not on the host.
  CUDA_CHECK_FATAL(cudaEventRecord(static_cast<cudaEvent_t>(done_event_), static_cast<cudaStream_t>(comm_stream_)));
  CUDA_CHECK_FATAL(cudaStreamWaitEvent(static_cast<cudaStream_t>(compute_stream_), static_cast<cudaEvent_t>(done_event_), 0));
#endif
}

void BucketAllReducer::BeginStep(int64_t step) {
  std::lock_guard lock(mu_);
  if (!lazy_grads_) buckets_.AllocateGrads();  // else each unit's backward makes its buckets'
  std::fill(reported_.begin(), reported_.end(), false);
  std::fill(ready_.begin(), ready_.end(), false);
  for (size_t i = 0; i < buckets_.size(); ++i) sync_[i].pending = buckets_[i].slots.size();
  next_ = done_ = released_ = 0;
  error_ = Status::OK();
  late_.clear();
  step_ = step;
  active_ = true;
}

void BucketAllReducer::MarkReadyLocked(size_t bucket) {
#if STRATA_HAVE_CUDA
  // Called on the training thread, right after backward enqueued the bucket's last gradient:
  // the event marks the point on the compute stream the reduction must wait for.
  if (compute_stream_) {
    CUDA_CHECK_FATAL(cudaEventRecord(static_cast<cudaEvent_t>(sync_[bucket].ready_event),
                                     static_cast<cudaStream_t>(compute_stream_)));
  }
#endif
  ready_[bucket] = true;
  if (trace_ && trace_->enabled()) {
    // An instant: when backward handed the bucket over (its reduction may start later, when
    // the communication thread gets a core).
    trace_->Add({"bucket " + std::to_string(bucket) + " ready", "comm", 0, trace_->NowUs(), 0, step_});
  }
  cv_.notify_all();
}

void BucketAllReducer::ReleaseReducedLocked() {
  // ZeRO-2, host gradients, once the buckets are final (after the first step's re-cut, which
  // reduces the full buffers once more): a bucket's full gradients go as soon as its
  // reduce-scatter ran (buckets run in order: [0, done_) have), not at the step's end.
  if (zero_ < 2 || comm_stream_ || (overlap_ && !rebuilt_)) return;
  for (; released_ < done_ && error_.ok(); ++released_) buckets_.ReleaseGrads(released_);
}

void BucketAllReducer::GradReady(nn::Parameter& p) {
  if (!overlap_) return;
  std::lock_guard lock(mu_);
  ReleaseReducedLocked();
  auto it = index_.find(&p);
  if (!active_ || it == index_.end()) return;
  const size_t k = it->second;
  if (reported_[k]) {
    // A parameter used twice (shared weights): its first report may already be reduced.
    if (late_.empty()) late_ = p.name;
    return;
  }
  reported_[k] = true;
  if (!rebuilt_) reported_order_.push_back(k);
  const size_t b = buckets_.bucket_of(k);
  if (--sync_[b].pending == 0) MarkReadyLocked(b);
}

Status BucketAllReducer::Finish(int64_t /*step*/) {
  STRATA_RETURN_IF_ERROR(WaitAllParams());  // forward waited for every unit's already
  const auto start = std::chrono::steady_clock::now();
  Trace::Scope scope(trace_, zero_ > 0 ? "wait for reduce-scatter" : "wait for all-reduce", "comm", 0, step_);
  std::unique_lock lock(mu_);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (ready_[i]) continue;
    buckets_.AllocateGrads(i);  // lazy: a bucket no backward touched reduces zeros
    MarkReadyLocked(i);
  }
  cv_.wait(lock, [&] { return done_ == buckets_.size(); });
  active_ = false;
  exposed_seconds_ += SecondsSince(start);
  if (!error_.ok()) return error_;
  ComputeWaitsForComm();
  if (!rebuilt_ && overlap_) {
    rebuilt_ = true;
    lock.unlock();
    STRATA_RETURN_IF_ERROR(Rebuild());
    lock.lock();
  }
  if (!late_.empty()) {
    return Status::FailedPrecondition("parameter " + late_ +
                                      " got gradient after it was reported ready (a shared "
                                      "parameter); set sync.overlap: false");
  }
  // ZeRO-2: the shards are all the optimizer reads; the full buffers go until the next step.
  // (Device mode keeps them: freeing under the communicator's stream would need a
  // stream-ordered allocator.)
  if (zero_ >= 2 && !comm_stream_) buckets_.ReleaseGrads();
  return Status::OK();
}

void BucketAllReducer::Run() {
#if STRATA_HAVE_CUDA
  if (comm_stream_) CUDA_CHECK_FATAL(cudaSetDevice(dynamic_cast<NcclCommunicator&>(comm_).device()));
#endif
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] {
      return stop_ || gather_next_ < gather_order_.size() || (active_ && next_ < buckets_.size() && ready_[next_]);
    });
    if (stop_) return;
    if (gather_next_ < gather_order_.size()) {
      // The parameters' all-gathers come before any reduction (every rank runs them first).
      const size_t b = gather_order_[gather_next_];
      const bool failed = !gather_error_.ok();
      lock.unlock();
      const auto start = std::chrono::steady_clock::now();
      Status s = failed ? Status::OK() : GatherBucket(b);
      const double secs = SecondsSince(start);
      lock.lock();
      gather_seconds_ += secs;
      if (!s.ok() && gather_error_.ok()) gather_error_ = s.WithContext("all-gather of bucket " + std::to_string(b));
      gathered_[b] = true;
      ++gather_next_;
      cv_.notify_all();
      continue;
    }
    const size_t i = next_;
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
#if STRATA_HAVE_CUDA
    if (comm_stream_) {
      CUDA_CHECK_FATAL(cudaStreamWaitEvent(static_cast<cudaStream_t>(comm_stream_),
                                           static_cast<cudaEvent_t>(sync_[i].ready_event), 0));
    }
#endif
    Status s = Reduce(i);
    const double secs = SecondsSince(start);
    lock.lock();
    comm_seconds_ += secs;
    ++next_;
    ++done_;
    if (!s.ok()) {
      error_ = s.WithContext((zero_ > 0 ? "reduce-scatter of bucket " : "all-reduce of bucket ") + std::to_string(i));
      next_ = done_ = buckets_.size();  // the communicator is unusable now; Finish returns
    }
    cv_.notify_all();
  }
}

Status BucketAllReducer::Reduce(size_t i) {
  Trace::Scope scope(trace_, (zero_ > 0 ? "reduce-scatter bucket " : "all-reduce bucket ") + std::to_string(i), "comm", 1, step_);
  const GradBucket& b = buckets_[i];
  if (b.grad.is_cpu() || comm_stream_) {
    // In place on the bucket (host memory for Gloo, device memory on NCCL's stream).
    float* g = b.grad.data_as<float>();
    if (zero_ == 0) return comm_.AllReduce(g, static_cast<size_t>(b.floats), ReduceOp::kAvg);
    if (shards_in_buckets_ && overlap_ && !rebuilt_) {
      // The first step's layout: Rebuild reduces this rank's own sums again in the new one, so
      // they stay (the result goes to a transient buffer).
      std::vector<float> discard(static_cast<size_t>(b.shard));
      return comm_.ReduceScatter(g, discard.data(), discard.size(), ReduceOp::kAvg);
    }
    return comm_.ReduceScatter(g, grad_shards_[i].data_as<float>(), static_cast<size_t>(b.shard), ReduceOp::kAvg);
  }
  // Device gradients over a host communicator: staged through the host.
  std::vector<float> host(static_cast<size_t>(b.padded));
  STRATA_RETURN_IF_ERROR(Tensor::HostView(host.data(), b.grad).CopyFrom(b.grad));
  if (zero_ == 0) {
    STRATA_RETURN_IF_ERROR(comm_.AllReduce(host.data(), static_cast<size_t>(b.floats), ReduceOp::kAvg));
    Tensor g = b.grad;
    return g.CopyFrom(Tensor::HostView(host.data(), b.grad));
  }
  std::vector<float> shard(static_cast<size_t>(b.shard));
  STRATA_RETURN_IF_ERROR(comm_.ReduceScatter(host.data(), shard.data(), shard.size(), ReduceOp::kAvg));
  return grad_shards_[i].CopyFrom(Tensor::HostView(shard.data(), grad_shards_[i]));
}

}  // namespace strata
