// grad_sync.h: how a data-parallel trainer keeps in step with the others.
//   BucketAllReducer: gradients in contiguous buckets (in backward order, like PyTorch DDP)
//     all-reduced (ZeRO: reduce-scattered) on a communication thread as soon as backward has
//     finished every gradient in the bucket, so communication hides behind the rest of backward.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "trainer/comm/communicator.h"
#include "trainer/data.h"
#include "trainer/grad_buckets.h"
#include "trainer/models/model.h"
#include "trainer/nn/module.h"
#include "trainer/sharded_buckets.h"
#include "trainer/trace.h"
#include "trainer/train_options.h"

namespace strata {

// How the data-parallel replicas of one model shard agree on its gradients: all-reduce
// (BucketAllReducer, Zero3Sync) or the parameter servers (PsSync, ps_sync.h); hybrid runs both, each over its own
// parameters. The step calls BeginStep before any backward, GradReady as backward (or W)
// finishes each gradient of the step's last micro-batch, and Finish after the last one.
class GradSync {
 public:
  virtual ~GradSync() = default;
  virtual void BeginStep(int64_t step) = 0;
  // `p`'s gradient is final for this step (Context::GradReady). Called on the training thread.
  virtual void GradReady(nn::Parameter& p) = 0;
  // Completes the step's synchronisation: afterwards local gradients are the replicas'
  // average (all-reduce), or the servers have them (ps).
  virtual Status Finish(int64_t step) = 0;
};

// Used by one training thread, plus the communication thread it owns. Gradients live in
// GradBuckets (each parameter's grad a view into its bucket), so a bucket is reduced in place.
//  - Host gradients, Gloo: the thread reduces a bucket when backward reported all of it.
//  - CUDA gradients, NCCL (`compute_stream` given): nothing blocks the host. When a bucket is
//    ready the training thread records an event on the compute stream; the thread makes the
//    communicator's stream wait for it and enqueues the bucket's reduction there; Finish()
//    makes the compute stream wait for the communicator's. Compute and communication overlap
//    on the device as they do on the host.
//  - CUDA gradients with a host communicator: staged through the host (correct, no overlap).
//
// ZeRO (`zero` >= 1): buckets are padded to a multiple of the dp size and rank r owns the r-th
// contiguous 1/dp of each; a ready bucket is reduce-scattered (averaged) into this rank's
// gradient shard (grad_shard(i)), the parameters' values live in bucket buffers too, and
// after the optimizer updated the owned slices AllGatherParams() gathers every bucket's
// values. ZeRO-2 also drops each full gradient buffer once reduced (host gradients: as backward
// goes on, from the second step; else in Finish) and makes them again, zeroed, at the next
// BeginStep: between steps (optimizer, all-gather, evaluation, checkpoints) only the shards
// exist.
class BucketAllReducer final : public GradSync, public ShardedBuckets, public UnitHooks {
 public:
  // `params`: the parameters to average (creation order) on `exec`'s device; buckets hold up
  // to `bucket_bytes` and follow the order backward finishes gradients in (learnt in the first
  // step).
  BucketAllReducer(Communicator& comm, std::vector<nn::Parameter*> params, const ops::Exec& exec,
                   size_t bucket_bytes, bool overlap, int zero, Trace* trace,
                   void* compute_stream = nullptr);
  ~BucketAllReducer();
  BucketAllReducer(const BucketAllReducer&) = delete;
  BucketAllReducer& operator=(const BucketAllReducer&) = delete;

  // Before any backward of the step: every gradient becomes pending (ZeRO-2: the gradient
  // buffers are made again, zeroed).
  void BeginStep(int64_t step) override;
  // The Context::GradReady hook: `p`'s gradient is final for this step.
  void GradReady(nn::Parameter& p) override;
  // Reduces what backward did not report (in bucket order), waits for every bucket and returns
  // the first error. Afterwards every gradient is the average over the ranks (ZeRO: every
  // gradient shard is).
  Status Finish(int64_t step) override;
  // ZeRO: every rank's updated slice of each bucket's values to every rank. Call after the
  // optimizer step, on the training thread. With the model's units known (SetUnits, host
  // tensors) it only queues the gathers, the first units' buckets first, on the communication
  // thread, and the next forward waits for each unit's buckets as it reaches them (UnitHooks):
  // the gathers overlap the next forward. Else it gathers everything before it returns.
  Status AllGatherParams();
  // Waits for every queued parameter all-gather; the first error. Call before anything else
  // reads every value or uses the dp group on the training thread (Finish calls it).
  Status WaitAllParams();

  // ZeRO, host tensors: the model whose unit walks the hooks see (the trainer installs this
  // object as its UnitHooks). Makes AllGatherParams asynchronous, and under ZeRO-2 a bucket's
  // gradients are made only when a unit's backward first needs them (and, from the second
  // step, freed once reduced): during backward a rank holds the buckets in flight, not all.
  void SetUnits(const Model& model);
  void BeforeUnit(int unit, Pass pass, UnitRange walk, const nn::Context& ctx) override;
  void AfterUnit(int /*unit*/, Pass /*pass*/, const nn::Context& /*ctx*/) override {}

  // Device mode: orders the communicator's stream after the compute stream's work so far
  // (before a collective on what compute wrote); nothing on the host.
  void CommAfterCompute() override { CommWaitsForCompute(start_event_); }

  size_t num_buckets() const { return buckets_.size(); }
  int zero() const override { return zero_; }
  Communicator& comm() override { return comm_; }
  GradBuckets& buckets() override { return buckets_; }
  // ZeRO: this rank's averaged slice of bucket i's gradient ([shard] floats).
  const Tensor& grad_shard(size_t i) const override { return grad_shards_[i]; }
  Tensor value_shard(size_t i) override {
    const GradBucket& b = buckets_[i];
    return b.value.Narrow(0, comm_.rank() * b.shard, b.shard);
  }
  int64_t grad_shard_bytes() const;
  // Floats of every bucket with its padding: as laid out now, and in the first layout.
  int64_t padded_floats() const;
  int64_t first_padded_floats() const { return first_padded_floats_; }
  // Totals since construction: seconds the communication thread spent reducing, and seconds
  // Finish() waited for it (the part backward did not hide).
  double comm_seconds() const { return comm_seconds_; }
  double exposed_seconds() const { return exposed_seconds_; }
  // ZeRO's parameter all-gathers: seconds the communication thread spent in them, and seconds
  // the training thread waited for them (the synchronous gather counts whole in both).
  double gather_seconds() const { return gather_seconds_; }
  double gather_exposed_seconds() const { return gather_exposed_; }

 private:
  struct Sync {                  // a bucket's state this step
    size_t pending = 0;          // gradients not yet reported
    void* ready_event = nullptr; // device mode: recorded on the compute stream when ready
  };
  void MarkReadyLocked(size_t bucket);
  void ReleaseReducedLocked();  // on the training thread
  void Layout(const std::vector<size_t>& order);
  void FreeEvents();
  void Run();                    // the communication thread
  // After the first step: buckets in the order backward actually finished the gradients (as
  // PyTorch DDP does), so a bucket is not held back by a gradient that comes much later.
  Status Rebuild();
  Status Reduce(size_t i);
  Status GatherBucket(size_t i);  // on the communication thread
  Status GatherValues(size_t i);  // the collective itself (either thread)
  Status GatherAllNow();          // every bucket, on the calling thread
  // Device mode: the communicator's stream waits for the compute stream (or `event` on it).
  void CommWaitsForCompute(void* event);
  void ComputeWaitsForComm();

  Communicator& comm_;
  const ops::Exec exec_;
  const int zero_;
  GradBuckets buckets_;
  std::vector<Tensor> grad_shards_;  // ZeRO: by bucket (ZeRO-1 on the host: views of the buckets)
  bool shards_in_buckets_ = false;
  int64_t first_padded_floats_ = 0;
  std::unordered_map<const nn::Parameter*, size_t> index_;
  std::vector<Sync> sync_;           // by bucket
  const bool overlap_;
  Trace* trace_;
  void* compute_stream_ = nullptr;  // device mode (see above)
  void* comm_stream_ = nullptr;
  void* done_event_ = nullptr;
  void* start_event_ = nullptr;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> reported_;   // by param index, this step
  std::vector<bool> ready_;      // by bucket, this step
  size_t next_ = 0;              // the next bucket the thread reduces
  size_t done_ = 0;              // buckets reduced this step
  size_t released_ = 0;          // ZeRO-2: buckets whose full gradients went this step
  // Asynchronous parameter all-gathers (SetUnits): queued in this order, run first.
  std::vector<size_t> gather_order_;
  size_t gather_next_ = 0;
  std::vector<bool> gathered_;   // by bucket: its values are current (after the last gather)
  Status gather_error_;
  std::vector<std::vector<size_t>> unit_params_;  // by unit: parameter indices (SetUnits)
  bool lazy_grads_ = false;      // ZeRO-2 with units: gradients made per unit in backward
  bool active_ = false;          // between BeginStep and Finish
  bool stop_ = false;
  int64_t step_ = 0;
  Status error_;
  std::string late_;             // a parameter reported twice (shared weights)
  bool rebuilt_ = false;
  std::vector<size_t> reported_order_;  // first step: parameter indices as reported
  double comm_seconds_ = 0, exposed_seconds_ = 0;
  double gather_seconds_ = 0, gather_exposed_ = 0;
  std::thread thread_;
};

}  // namespace strata
