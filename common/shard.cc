// shard.cc: ShardSpec's index arithmetic.
#include "common/shard.h"

namespace strata {

Shape ShardSpec::LocalShape() const {
  Shape s = global;
  if (!whole()) s[axis] /= parts;
  return s;
}

int64_t ShardSpec::BlockOffset(int b) const {
  const int64_t block = global[axis] / blocks;
  return b * block + index * (block / parts);
}

int64_t ShardSpec::GlobalIndex(int64_t i) const {
  if (whole()) return i;
  int64_t inner = 1;
  for (size_t d = axis + 1; d < global.size(); ++d) inner *= global[d];
  const int64_t local_axis = global[axis] / parts, local_block = local_axis / blocks;
  const int64_t in = i % inner, rest = i / inner;
  const int64_t a = rest % local_axis, outer = rest / local_axis;
  const int64_t ga = BlockOffset(static_cast<int>(a / local_block)) + a % local_block;
  return (outer * global[axis] + ga) * inner + in;
}

Status ShardSpec::Validate(const std::string& what) const {
  if (parts < 1 || index < 0 || index >= parts || blocks < 1) {
    return Status::InvalidArgument(what + ": shard " + ToString() + " is not a part of a split");
  }
  if (whole()) return Status::OK();
  int64_t numel = 1;
  for (int64_t d : global) {
    if (d <= 0 || numel > (int64_t{1} << 62) / d) {
      return Status::InvalidArgument(what + ": unsplit shape " + ShapeToString(global) + " is not a tensor's");
    }
    numel *= d;
  }
  if (axis < 0 || axis >= static_cast<int>(global.size())) {
    return Status::InvalidArgument(what + ": split axis " + std::to_string(axis) + " of a " +
                                   std::to_string(global.size()) + "-d tensor");
  }
  if (global[axis] % (static_cast<int64_t>(blocks) * parts) != 0) {
    return Status::InvalidArgument(what + ": dimension " + std::to_string(axis) + " (" +
                                   std::to_string(global[axis]) + ") does not split into " +
                                   std::to_string(blocks) + " x " + std::to_string(parts) +
                                   " equal slices");
  }
  return Status::OK();
}

std::string ShardSpec::ToString() const {
  if (whole()) return "whole";
  std::string s = "axis " + std::to_string(axis);
  if (blocks > 1) s += ", " + std::to_string(blocks) + " blocks";
  return s + ", part " + std::to_string(index) + " of " + std::to_string(parts);
}

}  // namespace strata
