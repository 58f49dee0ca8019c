// shard.h: ShardSpec, where a parameter's local tensor sits in the unsplit tensor when tensor
// parallelism splits it. Initialisation on a trainer or a server (each shard starts as exactly
// its slice of the unsplit tensor), checkpoints (shards written with their global offsets, read
// back into any layout) and gradient clipping (replicated parameters counted once) all read it.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "common/tensor.h"

namespace strata {

// Along `axis` the unsplit tensor of shape `global` is `blocks` equal blocks (qkv's q, k and v:
// 3; otherwise 1), and each block is cut into `parts` equal slices; this shard holds slice
// `index` of every block, in block order. With parts == 1 the tensor is whole (every
// tensor-parallel rank holds a copy of it).
//
//   ColumnParallelLinear weight [in, out]:  axis 1 (qkv: blocks 3), bias [out]: axis 0
//   RowParallelLinear weight [in, out]:     axis 0, bias whole
//   VocabParallelEmbedding table [V, C]:    axis 0
struct ShardSpec {
  Shape global;
  int axis = 0;
  int blocks = 1;
  int index = 0;
  int parts = 1;

  static ShardSpec Whole(Shape shape) { return {std::move(shape), 0, 1, 0, 1}; }
  bool whole() const { return parts == 1; }
  // The local tensor's shape: global with the axis divided by parts.
  Shape LocalShape() const;
  // Flat (row-major) index in the unsplit tensor of the local tensor's flat element `i`.
  int64_t GlobalIndex(int64_t i) const;
  // The first index along `axis` of this shard's slice of block `b` in the unsplit tensor.
  int64_t BlockOffset(int b) const;
  // Checks that the split is exact (axis in range, global[axis] divisible by blocks * parts,
  // index < parts); the error names `what`.
  Status Validate(const std::string& what) const;
  // "whole" or "axis 1, 3 blocks, part 0 of 2".
  std::string ToString() const;
  bool operator==(const ShardSpec&) const = default;
};

}  // namespace strata
