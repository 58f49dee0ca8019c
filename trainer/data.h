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
struct DataShard {
  int rank = 0;
  int count = 1;
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
