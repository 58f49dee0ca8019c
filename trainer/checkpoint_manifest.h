// checkpoint_manifest.h: CheckpointManifest, the manifest.json of a checkpoint directory: where
// training stood (in units that do not depend on the parallel layout), the plan that wrote it
// and every shard file with its size and checksum. Also the meta of a full-model file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/checkpoint_file.h"

namespace strata {

struct CheckpointManifest {
  int64_t step = 0;            // optimizer steps done
  int64_t optimizer_step = 0;  // Optimizer::step()
  // The data position: global batches of `batch_size` samples drawn (DataSource::position():
  // every replica draws its slice of the same global batch, so the count is the same under
  // any dp), with `micro_batches` of them per step.
  int64_t data_batches = 0;
  int64_t batch_size = 0;
  int micro_batches = 1;
  // The plan that wrote it (for people and strata-ckpt inspect; loading does not need it).
  int dp = 1, tp = 1, pp = 1, vpp = 1;
  std::string plan;  // ParallelPlan::ToString(), or how the checkpoint was made
  struct File {
    std::string name;  // relative to the checkpoint directory
    FileDigest digest;
  };
  std::vector<File> files;

  std::string ToJson() const;
  // InvalidArgument naming `where` unless `text` is a manifest of this format.
  static Result<CheckpointManifest> FromJson(const std::string& text, const std::string& where);
  // The plan's text ("dp=2 tp=1 pp=1 vpp=1 m=4 1f1b; stages [0,4)"), or the figures and how
  // the checkpoint was made ("dp=1 tp=1 pp=1 vpp=1 (from-full model.bin)").
  std::string PlanString() const;
};

}  // namespace strata
