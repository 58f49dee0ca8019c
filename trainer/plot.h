// plot.h: TrainingCurves (a run's loss at every step and its evaluations) and WritePlot, which
// draws them as a PNG (train.plot_path) by driving gnuplot as a child process: the loss on the
// left axis, the AUC (with the oracle's as a dashed line) on the right where there is one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace strata {

struct TrainingCurves {
  std::string title;               // e.g. "ctr, hybrid, 2 trainers"
  int64_t first_step = 0;          // losses[i] is step first_step + i + 1
  std::vector<double> losses;
  struct Eval {
    int64_t step = 0;
    double loss = 0;
    double auc = -1;               // -1: none (not ctr)
  };
  std::vector<Eval> evals;
  double oracle_auc = -1;          // -1: none
};

// Writes `curves` to `png_path` with `gnuplot` (a program name looked up on PATH, or a path).
// NotFound when gnuplot cannot be run (the caller notes it and goes on); IOError when it ran but
// failed or left no PNG.
[[nodiscard]] Status WritePlot(const TrainingCurves& curves, const std::string& png_path,
                               const std::string& gnuplot = "gnuplot");

// The gnuplot script WritePlot feeds it (data inline), for tests and --dry-run style checks.
std::string PlotScript(const TrainingCurves& curves, const std::string& png_path);

}  // namespace strata
