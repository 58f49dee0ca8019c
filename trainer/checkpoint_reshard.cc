// checkpoint_reshard.cc: a shard is a union of boxes of the unsplit tensor (one per block);
// copying between two shards copies the intersection of every pair of boxes, row by row.
#include "trainer/checkpoint_reshard.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "common/check.h"

namespace strata {
namespace {

// The part of the unsplit tensor in [lo, hi) along every dimension, which the shard holds at
// local coordinates global - lo + local_lo.
struct Box {
  std::vector<int64_t> lo, hi, local_lo;
};

std::vector<Box> BoxesOf(const ShardSpec& s) {
  const size_t rank = s.global.size();
  Box whole{std::vector<int64_t>(rank, 0), s.global, std::vector<int64_t>(rank, 0)};
  if (s.whole()) return {whole};
  const int64_t local_block = s.global[s.axis] / s.blocks / s.parts;
  std::vector<Box> boxes;
  for (int b = 0; b < s.blocks; ++b) {
    Box box = whole;
    box.lo[s.axis] = s.BlockOffset(b);
    box.hi[s.axis] = box.lo[s.axis] + local_block;
    box.local_lo[s.axis] = b * local_block;
    boxes.push_back(std::move(box));
  }
  return boxes;
}

std::vector<int64_t> Strides(const Shape& shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) st[d - 1] = st[d] * shape[d];
  return st;
}

// Copies the intersection of `a` (in src) and `b` (in dst); returns its element count.
int64_t CopyBoxes(const Box& a, const std::vector<int64_t>& src_strides, const float* src, const Box& b,
                  const std::vector<int64_t>& dst_strides, float* dst) {
  const size_t rank = a.lo.size();
  if (rank == 0) {
    dst[0] = src[0];
    return 1;
  }
  std::vector<int64_t> lo(rank), hi(rank);
  for (size_t d = 0; d < rank; ++d) {
    lo[d] = std::max(a.lo[d], b.lo[d]);
    hi[d] = std::min(a.hi[d], b.hi[d]);
    if (lo[d] >= hi[d]) return 0;
  }
  const int64_t run = hi[rank - 1] - lo[rank - 1];
  std::vector<int64_t> at = lo;  // the global coordinates of the current run's first element
  int64_t copied = 0;
  while (true) {
    int64_t s = 0, t = 0;
    for (size_t d = 0; d < rank; ++d) {
      s += (at[d] - a.lo[d] + a.local_lo[d]) * src_strides[d];
      t += (at[d] - b.lo[d] + b.local_lo[d]) * dst_strides[d];
    }
    std::memcpy(dst + t, src + s, static_cast<size_t>(run) * sizeof(float));
    copied += run;
    // The next run: odometer over every dimension but the last.
    size_t d = rank - 1;
    while (d > 0) {
      --d;
      if (++at[d] < hi[d]) break;
      at[d] = lo[d];
      if (d == 0) return copied;
    }
    if (rank == 1) return copied;
  }
}

}  // namespace

bool ShardsOverlap(const ShardSpec& a, const ShardSpec& b) {
  STRATA_CHECK(a.global == b.global) << ShapeToString(a.global) << " vs " << ShapeToString(b.global);
  for (const Box& x : BoxesOf(a)) {
    for (const Box& y : BoxesOf(b)) {
      bool meet = true;
      for (size_t d = 0; d < x.lo.size(); ++d) meet = meet && std::max(x.lo[d], y.lo[d]) < std::min(x.hi[d], y.hi[d]);
      if (meet) return true;
    }
  }
  return false;
}

int64_t CopyShardOverlap(const ShardSpec& src, const float* src_data, const ShardSpec& dst,
                         float* dst_data) {
  STRATA_CHECK(src.global == dst.global) << ShapeToString(src.global) << " vs " << ShapeToString(dst.global);
  const auto src_strides = Strides(src.LocalShape()), dst_strides = Strides(dst.LocalShape());
  int64_t copied = 0;
  for (const Box& a : BoxesOf(src)) {
    for (const Box& b : BoxesOf(dst)) copied += CopyBoxes(a, src_strides, src_data, b, dst_strides, dst_data);
  }
  return copied;
}

int64_t CopyShardOverlapReference(const ShardSpec& src, const float* src_data,
                                  const ShardSpec& dst, float* dst_data) {
  STRATA_CHECK(src.global == dst.global);
  int64_t n_src = 1, n_dst = 1;
  for (int64_t d : src.LocalShape()) n_src *= d;
  for (int64_t d : dst.LocalShape()) n_dst *= d;
  std::unordered_map<int64_t, int64_t> where;  // global index -> src local index
  for (int64_t i = 0; i < n_src; ++i) where[src.GlobalIndex(i)] = i;
  int64_t copied = 0;
  for (int64_t i = 0; i < n_dst; ++i) {
    auto it = where.find(dst.GlobalIndex(i));
    if (it == where.end()) continue;
    dst_data[i] = src_data[it->second];
    ++copied;
  }
  return copied;
}

}  // namespace strata
