// checkpoint.h: the trainer's checkpoint files: named f32 tensors (parameters, optimizer state)
// and where training stood, written atomically and durably (temporary file, fsync, rename,
// fsync of the directory) with a checksum, so a crash leaves the old checkpoint or the new one,
// never a torn one.
//
// Format: "STRATACK", u32 version, i64 step, i64 data position, i64 optimizer step, u32 count,
// then per tensor: u32 name length, name, i64 numel, f32 values; u64 XXH3-64 of all preceding
// bytes. Version 2 (version 1 used FNV-1a and is refused, naming its version).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"

namespace strata {

struct CheckpointHeader {
  int64_t step = 0;            // optimizer steps done
  int64_t data_position = 0;   // DataSource::position()
  int64_t optimizer_step = 0;  // Optimizer::step()
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes <dir>/ckpt-<step>.bin and points <dir>/latest at it; returns the file's path.
Result<std::string> WriteCheckpoint(const std::string& dir, const CheckpointHeader& header,
                                    const NamedTensors& tensors);
// Reads `path` into `tensors` (matched by name; the count and every size must agree). Nothing is
// written into them unless the whole file is read and its checksum matches.
Status ReadCheckpoint(const std::string& path, const NamedTensors& tensors, CheckpointHeader* header);
// The path `<dir>/latest` names, or empty when there is none.
std::string LatestCheckpoint(const std::string& dir);

}  // namespace strata
