// checkpoint_file.h: one checkpoint shard file (format 3): named f32 tensors, each stored as
// the slice of its unsplit tensor that a ShardSpec names, behind an index that lets a reader
// seek to one tensor without reading the others. Written durably (temporary file, fsync,
// rename, fsync of the directory), so a crash leaves no torn file under the final name.
//
// Layout (little-endian):
//   header  "STRATASH", u32 version (3), u32 0, u64 index bytes, u64 XXH3-64 of the index
//   index   u32 meta length, meta (JSON text), u32 tensor count, then per tensor:
//           u32 name length, name, u32 rank, i64 global dims[rank], i32 axis, i32 blocks,
//           i32 index, i32 parts, u64 data offset, u64 data bytes, u64 XXH3-64 of the data
//   data    each tensor's local f32 values (row-major), at 64-byte aligned offsets
// A full-model file (strata-ckpt to-full) is the same format with every tensor whole.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"
#include "common/shard.h"

namespace strata {

inline constexpr uint32_t kCheckpointFormat = 3;

// A tensor of a checkpoint: a parameter or an optimizer state tensor ("adamw.m/<param>"), its
// local values and where they sit in the unsplit tensor.
struct ShardTensor {
  std::string name;
  ShardSpec spec;
  Tensor value;  // spec.LocalShape(), f32, any device (written through a host copy)
};

// What the manifest records of a file: its size and the XXH3-64 of all its bytes.
struct FileDigest {
  uint64_t bytes = 0;
  uint64_t checksum = 0;
};

// One index entry.
struct TensorEntry {
  std::string name;
  ShardSpec spec;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint64_t checksum = 0;
};

// Writes `tensors` with `meta` (JSON text) to `path` durably.
Result<FileDigest> WriteShardFile(const std::string& path, const std::string& meta,
                                  const std::vector<ShardTensor>& tensors);

// An opened shard file: its index, read and checked once; tensors are read on demand. A value
// (holds the path, not a descriptor); reads reopen the file.
class ShardFile {
 public:
  // Reads and checks the header and index: Corruption naming the file for a bad magic,
  // checksum or truncation (data the index places past the end of the file);
  // FailedPrecondition for another format version (2: the per-rank single-layout files).
  static Result<ShardFile> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::string& meta() const { return meta_; }
  const std::vector<TensorEntry>& entries() const { return entries_; }
  uint64_t size() const { return size_; }

  // Reads entry `e`'s values into `out` (e.bytes / 4 floats) and checks its checksum.
  Status Read(const TensorEntry& e, float* out) const;
  // The XXH3-64 of the whole file, read from disk (what strata-ckpt inspect verifies).
  Result<FileDigest> Digest() const;

 private:
  std::string path_;
  std::string meta_;
  std::vector<TensorEntry> entries_;
  uint64_t size_ = 0;
};

// Helpers shared with the checkpoint directory: fsync of a file or directory, and a durable
// rename (source synced, renamed, directory synced).
Status SyncPath(const std::string& path, bool directory);
Status DurableRename(const std::string& from, const std::string& to, const std::string& dir);

}  // namespace strata
