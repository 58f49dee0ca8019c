// data.h: training data. Batch, the DataSource interface (deterministic: batch k depends only
// on the seed and k, which makes resume exact), its sources (synthetic regression, synthetic
// click logs with a planted logistic model, Criteo TSV files, byte-level text) and AUC.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"
#include "trainer/train_options.h"

namespace strata {

// One micro-batch on the host. Which fields are set depends on the model:
//   mlp: x f32 [N, in], target f32 [N, out]
//   ctr: ids i32 [N, fields] (already offset into one table: field f uses
//        [f * field_vocab, (f + 1) * field_vocab)), x f32 [N, dense] (undefined when dense is 0),
//        target f32 [N] labels, oracle f32 [N] the planted click probability (synthetic only)
//   gpt: ids i32 [N, T] tokens, target i32 [N, T] the next tokens
struct Batch {
  Tensor x;
  Tensor ids;
  Tensor target;
  Tensor oracle;
  int64_t samples = 0;
  int64_t tokens = 0;
};

// A stream of batches. Not thread-safe.
class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual Batch Next() = 0;
  // The held-out set, split into batches of at most `batch_size` (the same every call).
  virtual std::vector<Batch> EvalSet(int64_t batch_size) = 0;
  // How many batches Next has returned; Seek(n) makes the next batch the n-th (for resume).
  int64_t position() const { return position_; }
  virtual void Seek(int64_t position) { position_ = position; }

 protected:
  int64_t position_ = 0;
};

// The distributed sampler: data-parallel trainer `rank` of `count` reads its slice of every
// global batch (samples [rank * b, (rank + 1) * b) with b = batch / count). Sample i of batch k
// depends only on (seed, k, i), so the shards of any split are disjoint and together are exactly
// the batch one trainer would read: losses and gradients match the single-trainer run.
//
// Elastic jobs (cluster.elastic) set `split`: then the trainers that split global batch k change
// with the membership, each reads batch / count samples (count: the job's first trainer
// count) at the slot the split gives it, and batch k holds as many slices as it has members.
class SplitPlan {
 public:
  struct Slot {
    int slot = 0;               // which slice of the global batch this trainer reads
    int64_t slots_before = 0;   // slices of all the global batches before it (stream position)
  };
  virtual ~SplitPlan() = default;
  // This trainer's slot in the global batch of data position `position`; it must be one of
  // the batch's members (the trainer checks that before it reads).
  virtual Slot At(int64_t position) const = 0;
};

struct DataShard {
  DataShard() = default;
  DataShard(int shard_rank, int shard_count, std::shared_ptr<const SplitPlan> elastic = nullptr)
      : rank(shard_rank), count(shard_count), split(std::move(elastic)) {}

  int rank = 0;
  int count = 1;
  std::shared_ptr<const SplitPlan> split;  // set: elastic (see SplitPlan)

  // Where this shard's slice of global batch `position` starts, in samples of the batch and of
  // the whole stream, for a per-trainer slice of `local` samples.
  struct Span {
    int64_t in_batch = 0;
    int64_t in_stream = 0;
  };
  Span SpanOf(int64_t position, int64_t local) const {
    if (!split) return {rank * local, position * count * local + rank * local};
    const SplitPlan::Slot s = split->At(position);
    return {s.slot * local, (s.slots_before + s.slot) * local};
  }
};

// `batch_size` is the global batch; it must be divisible by shard.count.
Result<std::unique_ptr<DataSource>> CreateDataSource(const DataOptions& data,
                                                     const ModelOptions& model,
                                                     int64_t batch_size, DataShard shard = {});

// Area under the ROC curve of `scores` against 0/1 `labels` (ties count one half).
double Auc(const std::vector<float>& scores, const std::vector<float>& labels);

// The empirical byte-unigram entropy of `bytes`, in nats (the loss a model that ignores
// context can reach).
double UnigramEntropy(const std::vector<uint8_t>& bytes);

}  // namespace strata
