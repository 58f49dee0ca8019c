// store_format.h: the tiered store's on-disk formats: record keys in RocksDB, the checkpoint
// manifest and the table export file. Checksums are Checksum64 (common/checksum.h: XXH3-64).
//
// Each file names its format version. Version 1 (FNV-1a checksums) is recognised and refused
// with FailedPrecondition saying so, never read as corrupt or skipped; any other unknown version
// likewise.
//
// Update ids (RocksDB column family `strata_update_ids`, RowStore::UpdateWithId): one entry per
// sender and id slot, so each sender keeps its last kRecordedIdsPerSender ids:
//   key   u32 sender | u16 id % kRecordedIdsPerSender   (big-endian, 6 bytes)
//   value u64 id                                         (little-endian)
// Added without a version change: a store or checkpoint written before it opens with the family
// empty (no ids recorded), and its records replay as before.
//
// Checkpoint manifest (text, `STRATA_MANIFEST` in the checkpoint directory):
//   strata-checkpoint 2
//   width <floats per record>
//   clock <clock of the snapshot>
//   records <records in the snapshot>
//   file <path relative to the checkpoint dir> <bytes>      (one line per file of the copy)
//   metadata <n>\n<n bytes chosen by the caller: table spec, optimizer step counts, ...>\n
//   checksum <16 hex digits: Checksum64 of every byte before this line>\n
//
// Export file (binary, little-endian):
//   header  "STRATAX2" | u32 width | u32 0     ("STRATAX" and the version digit)
//   records u64 key | width x f32         (in key order)
//   trailer "STRATEND" | u64 record count | u64 Checksum64 of every byte before the checksum
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/checksum.h"
#include "common/status.h"

namespace strata::offload_internal {

// RocksDB keys are 8 bytes big-endian, so RocksDB's order is the keys' numeric order.
inline void EncodeKey(uint64_t key, char* out) {
  for (int i = 7; i >= 0; --i, key >>= 8) out[i] = static_cast<char>(key & 0xff);
}
inline uint64_t DecodeKey(const char* in) {
  uint64_t key = 0;
  for (int i = 0; i < 8; ++i) key = (key << 8) | static_cast<unsigned char>(in[i]);
  return key;
}

inline constexpr const char* kUpdateIdsFamily = "strata_update_ids";
inline constexpr size_t kUpdateIdKeyBytes = 6;
inline void EncodeUpdateIdKey(uint32_t sender, uint64_t id, char* out) {
  for (int i = 3; i >= 0; --i, sender >>= 8) out[i] = static_cast<char>(sender & 0xff);
  out[4] = static_cast<char>((id >> 8) & 0xff);
  out[5] = static_cast<char>(id & 0xff);
}
inline uint32_t DecodeUpdateIdSender(const char* in) {
  uint32_t sender = 0;
  for (int i = 0; i < 4; ++i) sender = (sender << 8) | static_cast<unsigned char>(in[i]);
  return sender;
}

struct CheckpointManifest {
  int width = 0;
  uint64_t clock = 0;
  uint64_t records = 0;
  std::vector<std::pair<std::string, uint64_t>> files;  // relative path, size in bytes
  std::string metadata;
};

inline constexpr const char* kManifestName = "STRATA_MANIFEST";
std::string EncodeManifest(const CheckpointManifest& m);
// Corruption naming `path` (used in messages only) when the text is not a whole, intact manifest;
// FailedPrecondition when it is a manifest of another format version.
Result<CheckpointManifest> DecodeManifest(std::string_view text, const std::string& path);

// Streams an export file. Errors name the path.
class ExportWriter {
 public:
  ~ExportWriter();
  // Creates path.tmp; Finish() renames it to `path`.
  static Result<std::unique_ptr<ExportWriter>> Create(const std::string& path, int width);
  Status Add(uint64_t key, const float* record);
  Status Finish();

 private:
  ExportWriter(std::string path, int width, std::FILE* f) : path_(std::move(path)), width_(width), f_(f) {}
  Status Write(const void* data, size_t size);

  std::string path_;
  int width_;
  std::FILE* f_;
  uint64_t count_ = 0;
  Checksum64Stream checksum_;
};

// Reads an export file whole, checking the header, size and checksum before handing out records.
// FailedPrecondition for an export file of another format version.
class ExportReader {
 public:
  static Result<ExportReader> Open(const std::string& path, int width);
  uint64_t count() const { return count_; }
  uint64_t key(uint64_t i) const;
  const float* record(uint64_t i) const;

 private:
  std::string bytes_;
  int width_ = 0;
  uint64_t count_ = 0;
};

}  // namespace strata::offload_internal
