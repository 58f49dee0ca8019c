// zero3.h: Zero3Sync, ZeRO-3 (fully sharded data parallelism, FSDP): the parameters are
// sharded over the data-parallel ranks as the gradients and optimizer state are under ZeRO-2,
// and a unit's full parameters exist only while it computes.
//
// One bucket per model unit (embedding, block, head), laid out in backward's order and padded
// to a multiple of dp; rank r keeps the r-th 1/dp of each bucket's values (the shard its
// optimizer updates: ShardedOptimizer over this ShardedBuckets) and, after the step's
// reduce-scatter, of its averaged gradient. Around each unit the model calls the UnitHooks:
//  - before a unit computes, its bucket is all-gathered (unless still gathered), and the next
//    unit's gather is issued at once (prefetch), so it runs while this unit computes;
//  - after a unit's forward its full values are freed (the last unit's are kept for the
//    backward that follows at once), and after its backward too;
//  - a unit's gradient buffer is made (zeroed) at its first backward of the step and, once
//    backward of the step's last micro-batch finished it, reduce-scattered (on the
//    communication thread, while backward goes on) and freed.
// Between steps a rank holds 16/dp bytes a parameter for fp32 AdamW (values, gradient shards,
// m, v), plus nothing else of the model.
//
// Every collective runs on one communication thread, in the order the training thread issued
// them; every rank issues the same sequence (the same model walked by the same schedule), so
// the dp group's collectives match. Device mode (NCCL, `compute_stream`): the thread enqueues
// each collective on the communicator's stream after an event the training thread recorded on
// the compute stream, and waiting for it makes the compute stream wait for its done event.
//
// Needs every unit's backward whole (pp 1 and a schedule with B, not I/W: parallel options
// refuse the others) and every rank of the dp group in every forward (evaluation included).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "trainer/grad_sync.h"
#include "trainer/models/model.h"
#include "trainer/sharded_buckets.h"

namespace strata {

class Zero3Sync final : public GradSync, public ShardedBuckets, public UnitHooks {
 public:
  // Takes `model`'s parameters (its built units'; the values each rank holds are equal, as
  // after the dp broadcast): lays them out one bucket per unit, keeps this rank's shards and
  // frees the rest, and installs itself as the model's unit hooks. With `prefetch` the next
  // unit's gather and the reduce-scatters overlap compute; without, each runs when needed.
  Zero3Sync(Communicator& comm, Model& model, bool prefetch, Trace* trace, void* compute_stream = nullptr);
  ~Zero3Sync() override;
  Zero3Sync(const Zero3Sync&) = delete;
  Zero3Sync& operator=(const Zero3Sync&) = delete;

  // GradSync: the step's gradients are released until a unit's backward makes them; Finish
  // reduce-scatters what backward did not report, waits for every collective and frees the
  // full gradients: afterwards every gradient shard is the replicas' average.
  void BeginStep(int64_t step) override;
  void GradReady(nn::Parameter& p) override;
  Status Finish(int64_t step) override;

  // UnitHooks (the model calls them).
  void BeforeUnit(int unit, Pass pass, UnitRange walk, const nn::Context& ctx) override;
  void AfterUnit(int unit, Pass pass, const nn::Context& ctx) override;

  // ShardedBuckets.
  GradBuckets& buckets() override { return buckets_; }
  Communicator& comm() override { return comm_; }
  int zero() const override { return 3; }
  const Tensor& grad_shard(size_t i) const override { return grad_shards_[i]; }
  Tensor value_shard(size_t i) override { return value_shards_[i]; }
  void CommAfterCompute() override;

  // Checkpoints: every bucket's full values on every rank (collective over dp; the parameters'
  // values defined), then back to shards only. With `take`, each rank first takes its slices
  // from the full values (a checkpoint was loaded into them).
  Status GatherAll();
  Status ReleaseAll(bool take);

  // Bytes of this rank's value and gradient shards; floats of every bucket with its padding.
  int64_t value_shard_bytes() const;
  int64_t grad_shard_bytes() const;
  int64_t padded_floats() const;
  // Unit u's bucket's padded floats (0: the unit has no parameters here).
  int64_t unit_padded_floats(int unit) const;
  // Totals since construction (read them while no step runs), seconds: the communication thread in all-gathers and in
  // reduce-scatters, and the training thread waiting for each (the part compute did not hide).
  double gather_seconds() const { return gather_seconds_; }
  double gather_exposed_seconds() const { return gather_exposed_; }
  double reduce_seconds() const { return reduce_seconds_; }
  double reduce_exposed_seconds() const { return reduce_exposed_; }
  int64_t gathers() const { return gathers_; }

 private:
  enum class Kind { kGather, kReduce };
  struct Op {
    Kind kind;
    size_t bucket;
    uint64_t seq;
    int64_t step;
  };
  struct Bucket {             // the state of one bucket on the training thread
    uint64_t gather = 0;      // seq of its gather in flight or done (0: values released)
    uint64_t reduce = 0;      // seq of this step's reduce-scatter (0: not issued)
    size_t pending = 0;       // gradients of the step's last micro-batch not yet reported
    void* gather_start = nullptr, *gather_done = nullptr;  // device mode: events
    void* reduce_start = nullptr, *reduce_done = nullptr;
  };

  // Issues bucket b's all-gather (its value buffer made first) unless gathered or in flight.
  void Gather(size_t b);
  void Reduce(size_t b);
  uint64_t Enqueue(Kind kind, size_t b);
  // Waits until op `seq` ran (device mode: until it is enqueued, then orders the compute
  // stream after it); returns the first error of any op. Adds the wait to `*exposed`.
  Status Wait(uint64_t seq, void* done_event, double* exposed);
  // Frees the gradients of every bucket whose reduce-scatter ran.
  void Reap();
  void ReleaseValues(size_t b);
  int NextBucketUnit(int unit, Pass pass, UnitRange walk) const;  // -1: none
  void Run();  // the communication thread
  Status Execute(const Op& op);

  Communicator& comm_;
  Model& model_;
  const ops::Exec exec_;
  const bool prefetch_;
  Trace* trace_;
  void* compute_stream_ = nullptr;  // device mode
  void* comm_stream_ = nullptr;
  GradBuckets buckets_;
  std::vector<int> bucket_of_unit_;   // -1: the unit has no parameters here
  int last_unit_ = -1;                // the last unit with a bucket (its values stay for backward)
  std::vector<Tensor> value_shards_, grad_shards_;
  std::vector<Bucket> state_;
  std::unordered_map<const nn::Parameter*, size_t> index_;
  std::vector<bool> reported_;        // by parameter, this step
  bool active_ = false;               // between BeginStep and Finish
  int64_t step_ = 0;
  std::string late_;                  // a parameter reported twice

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;
  uint64_t issued_ = 0;     // training thread only
  uint64_t completed_ = 0;  // ops run (device mode: enqueued on the stream)
  bool stop_ = false;
  Status error_;
  double gather_seconds_ = 0, reduce_seconds_ = 0;  // under mu_
  double gather_exposed_ = 0, reduce_exposed_ = 0;  // training thread
  int64_t gathers_ = 0;
  std::thread thread_;
};

}  // namespace strata
