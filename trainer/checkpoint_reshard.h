// checkpoint_reshard.h: copying between two shards of one unsplit tensor laid out under
// different ShardSpecs (tp 2 written, tp 4 or whole read; qkv's blocks), the arithmetic that
// lets a checkpoint load into any parallel layout. Host memory, f32.
#pragma once

#include <cstdint>

#include "common/shard.h"

namespace strata {

// Whether shards `a` and `b` of the same unsplit tensor (equal global shapes) share an element.
bool ShardsOverlap(const ShardSpec& a, const ShardSpec& b);

// Copies every element that shard `src` (values `src_data`, laid out as src.LocalShape()) and
// shard `dst` (`dst_data`, dst.LocalShape()) have in common, by contiguous runs of the last
// dimension; returns how many. Global shapes must be equal (a bug otherwise: aborts).
int64_t CopyShardOverlap(const ShardSpec& src, const float* src_data, const ShardSpec& dst,
                         float* dst_data);

// The reference: element by element through ShardSpec::GlobalIndex (tests compare against it).
int64_t CopyShardOverlapReference(const ShardSpec& src, const float* src_data,
                                  const ShardSpec& dst, float* dst_data);

}  // namespace strata
