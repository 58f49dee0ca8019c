// progress.h: Progress, what a trainer tells people while it runs: the progress line on stderr
// (one process), @progress JSON lines that strata-launch folds into one line (a cluster), and
// the JSON-lines metrics file.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/status.h"
#include "trainer/plot.h"
#include "trainer/train_options.h"

namespace strata {

// Used by the training thread.
class Progress {
 public:
  // `launched`: under strata-launch (main() reads STRATA_PROGRESS). `trainers`: every trainer
  // of the job (the launcher adds up their shares of the samples per second).
  Progress(const TrainJob& job, int rank, int trainers, bool launched);
  // Opens train.metrics_path ("{rank}" replaced) when this rank writes metrics.
  Status Open();

  // After step `step` (1-based) of train.steps.
  void Step(int64_t step, double loss, double lr, double grad_norm, double step_seconds, double elapsed);
  // One step's time (every step; published with the next Step) and one checkpoint's write
  // time (published at once), as histograms.
  void StepTime(double seconds) { step_time_.Observe(seconds); }
  void CheckpointTime(double seconds);
  // A metrics line; the evaluations among them (they carry "eval_loss") are also kept.
  void Metrics(const std::string& json_line);
  // Every evaluation this rank reported, in order (train.plot_path draws them).
  const std::vector<TrainingCurves::Eval>& evals() const { return evals_; }
  // Where Step, the evaluations and the end-of-run communication figures are also published
  // (docs/metrics.md); nullptr: nowhere.
  void SetMetrics(MetricsRegistry* registry) { registry_ = registry; }
  // Ends the progress line (a terminal's \r line) before other output.
  void Done();

 private:
  const TrainJob& job_;
  const int rank_, trainers_;
  const bool launched_;
  std::ofstream metrics_;
  std::vector<TrainingCurves::Eval> evals_;
  MetricsRegistry* registry_ = nullptr;
  Histogram step_time_, checkpoint_time_;
};

// "{rank}" in `path` becomes the rank.
std::string ForRank(std::string path, int rank);

}  // namespace strata
