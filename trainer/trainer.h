// trainer.h: Trainer, the training loop behind strata-trainer: steps of micro-batches,
// clipping, schedule, optimizer; progress line, JSON-lines metrics, evaluation, and checkpoints
// that resume exactly (on the CPU, bit-for-bit the uninterrupted run). Alone (sync.mode local)
// or as one data-parallel rank of a cluster: all-reduce (BucketAllReducer), parameter servers
// (PsSync), or both (hybrid); see grad_sync.h.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "trainer/data.h"
#include "trainer/models.h"
#include "trainer/optim.h"
#include "trainer/train_options.h"

namespace strata {

struct EvalMetrics {
  double loss = 0;         // mean loss over the held-out set
  double auc = -1;         // ctr only
  double oracle_auc = -1;  // ctr on synthetic click logs: AUC of the planted probabilities
  int64_t samples = 0;
};

struct TrainSummary {
  int64_t first_step = 0;       // where this run started (after a resume, the checkpoint's step)
  std::vector<double> losses;   // one per step run, starting at first_step (the mean over the
                                // data-parallel ranks when they all-reduce; else this rank's)
  EvalMetrics eval;             // at the end (rank 0 only in a cluster)
  double seconds = 0;           // training, without the final evaluation
  double samples_per_second = 0;  // global samples (every rank's) per second of training
  // All-reduce: seconds spent reducing and the part of it backward did not hide.
  double comm_seconds = 0;
  double exposed_comm_seconds = 0;
};

class Node;
class Communicator;
class PsClient;
class PsSync;
class BucketAllReducer;
class Trace;

// Owns the model, optimizer, data and (for CUDA) the device context. Not thread-safe.
class Trainer {
 public:
  // With sync.mode other than local, `node` is this trainer's joined cluster node; its rank
  // is the data-parallel rank, and every trainer of the cluster takes part. Create and Run
  // return ResourceExhausted when the device runs out of memory (ops::OutOfMemory).
  static Result<std::unique_ptr<Trainer>> Create(const TrainJob& job, Node* node = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Resumes from train.checkpoint_dir/latest when asked and present, then trains to
  // train.steps, checkpointing and evaluating as configured.
  Result<TrainSummary> Run();
  EvalMetrics Evaluate();  // may throw ops::OutOfMemory (Run catches it)

  // Writes ckpt-<step>.bin (parameters, optimizer state, step, data position) atomically and
  // points `latest` at it.
  Status SaveCheckpoint();
  // Reads a checkpoint written by SaveCheckpoint for the same model.
  Status LoadCheckpoint(const std::string& path);

  Model& model() { return *model_; }
  int64_t step() const { return step_; }
  int rank() const { return rank_; }
  int world() const { return world_; }
  // Text data: the byte-unigram entropy of the file in nats (0 otherwise).
  double unigram_entropy() const { return unigram_entropy_; }

 private:
  explicit Trainer(const TrainJob& job);
  static Result<std::unique_ptr<Trainer>> Build(const TrainJob& job, Node* node);
  Result<TrainSummary> RunSteps();
  Status Connect(Node* node);
  std::vector<Batch> NextBatches();
  Result<double> TrainStep();
  Status Finish();  // a cluster run: waits for every trainer
  void Log(double loss, double lr, double grad_norm, double step_seconds, double elapsed);
  void WriteMetrics(const std::string& json_line);

  TrainJob job_;
  struct DeviceState;
  std::unique_ptr<DeviceState> device_;  // CUDA stream, cuBLAS handle and allocator
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<DataSource> data_;
  std::vector<Batch> eval_set_;
  // A cluster run.
  Node* node_ = nullptr;
  int rank_ = 0, world_ = 1;
  std::unique_ptr<Trace> trace_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<PsClient> client_;
  std::unique_ptr<PsSync> ps_;
  std::unique_ptr<BucketAllReducer> reducer_;
  std::vector<Batch> lookahead_;  // the next step's batches, already prefetched
  bool launched_ = false;  // under strata-launch (STRATA_PROGRESS=launcher): @progress lines
  int64_t step_ = 0;
  double unigram_entropy_ = 0;
  std::ofstream metrics_;
};

}  // namespace strata
