// trainer.h: Trainer, the single-process training loop behind strata-trainer: steps of
// micro-batches, clipping, schedule, optimizer; progress line, JSON-lines metrics, evaluation,
// and checkpoints that resume exactly (on the CPU, bit-for-bit the uninterrupted run).
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
  std::vector<double> losses;   // one per step run, starting at first_step
  EvalMetrics eval;             // at the end
  double seconds = 0;
};

// Owns the model, optimizer, data and (for CUDA) the device context. Not thread-safe.
class Trainer {
 public:
  static Result<std::unique_ptr<Trainer>> Create(const TrainJob& job);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Resumes from train.checkpoint_dir/latest when asked and present, then trains to
  // train.steps, checkpointing and evaluating as configured.
  Result<TrainSummary> Run();
  EvalMetrics Evaluate();

  // Writes ckpt-<step>.bin (parameters, optimizer state, step, data position) atomically and
  // points `latest` at it.
  Status SaveCheckpoint();
  // Reads a checkpoint written by SaveCheckpoint for the same model.
  Status LoadCheckpoint(const std::string& path);

  Model& model() { return *model_; }
  int64_t step() const { return step_; }
  // Text data: the byte-unigram entropy of the file in nats (0 otherwise).
  double unigram_entropy() const { return unigram_entropy_; }

 private:
  explicit Trainer(const TrainJob& job);
  double TrainStep();
  void Log(double loss, double lr, double grad_norm, double step_seconds, double elapsed);
  void WriteMetrics(const std::string& json_line);

  TrainJob job_;
  struct DeviceState;
  std::unique_ptr<DeviceState> device_;  // CUDA stream, cuBLAS handle and allocator
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<DataSource> data_;
  std::vector<Batch> eval_set_;
  int64_t step_ = 0;
  double unigram_entropy_ = 0;
  std::ofstream metrics_;
};

}  // namespace strata
