// calibrate.h: what the planner (planner.h) measures of a model on this device before it
// predicts anything: per unit and per local micro-batch size and recompute mode, the forward,
// full backward, backward-for-input and backward-for-weights times and the bytes a forward
// leaves alive until its backward; and the time per parameter of what a step does after backward
// (the gradient norm's pass and the optimizer's update). Measured as the job's
// trainers will run: with each trainer's CPU threads (the caller sets them: strata-plan's main,
// or the launcher's OPENBLAS_NUM_THREADS in a trainer) and, on the CPU, under the job's own load:
// `corun` copies of each measurement at once, one per core the trainers keep busy, so the figures
// carry what busy neighbours cost (shared caches, memory bandwidth, the hypervisor's share).
// Cached as JSON in a file keyed by the model's options, the device, the threads and the co-run,
// so a second run (and every trainer of a `parallel.auto` job) reads the same numbers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "trainer/ops/exec.h"
#include "trainer/train_options.h"

namespace strata {

// One unit on one micro-batch. Seconds; bytes as the allocator counts them.
struct UnitProfile {
  double f = 0, b = 0, i = 0, w = 0;  // forward, full backward, backward split in input + weight
  int64_t saved_bytes = 0;   // alive from the end of its forward to the start of its backward (output included)
  int64_t peak_bytes = 0;    // the most above that during the unit's forward and backward
  int64_t output_bytes = 0;  // the activation handed to the next unit
};

// Local micro-batch (samples per rank per micro-batch) and recompute mode.
using ProfileKey = std::pair<int64_t, ParallelOptions::Recompute>;

struct Calibration {
  std::string key;  // CalibrationKey: the model's options and the device
  std::map<ProfileKey, std::vector<UnitProfile>> units;  // one profile per unit of the model
  double optimizer_s_per_param = 0;  // the gradient-norm pass and one optimizer step, seconds per parameter
  // Pipeline steps measured by PipelineReplay on this host (the planner's oversubscribed
  // pipelines), seconds by PipelineKey.
  std::map<std::string, double> pipeline_s;
  int reps = 7;
  // Copies of each measurement run at once on as many threads (CPU only), each on its own model,
  // inputs and allocator; a time is the median over copies and repetitions, bytes are copy 0's.
  int corun = 1;

  // The profiles of (micro_batch, recompute); NotFound when they were not measured.
  Result<const std::vector<UnitProfile>*> Find(int64_t micro_batch, ParallelOptions::Recompute r) const;
};

// "gpt layers=2 heads=4 width=64 context=32 vocab=256 ... optimizer=adamw device=cpu threads=1
// corun=2": `threads` the compute threads of one trainer (ops::ParallelThreads), `corun` as above.
std::string CalibrationKey(const TrainJob& job, const std::string& device, int threads = 1, int corun = 1);

// The co-run of a calibration for `world` trainers on `cores` CPU cores: the cores they keep busy,
// min(world, cores); 1 for a CUDA device or unknown cores (0).
int CalibrationCorun(int world, int cores, const std::string& device);

// Measures what `needed` lists and `cal` lacks (median of `cal.reps` after one warm-up, over
// `cal.corun` copies at once), one unit built at a time as MeasureUnitCosts does; the optimizer
// on the largest unit when not yet measured. Samples come from the job's data source.
Status Calibrate(const TrainJob& job, const ops::Exec& exec, const std::vector<ProfileKey>& needed,
                 Calibration& cal);

// The cache file holds one Calibration per key. Load: an empty Calibration with `key` when the
// file or the key is absent; Corruption when the file is not what Save writes.
Result<Calibration> LoadCalibration(const std::string& path, const std::string& key);
Status SaveCalibration(const std::string& path, const Calibration& cal);

std::string_view RecomputeName(ParallelOptions::Recompute r);  // "none", "selective", "full"

}  // namespace strata
