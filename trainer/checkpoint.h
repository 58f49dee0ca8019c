// checkpoint.h: checkpoints that load into any parallel layout. A checkpoint is a directory
// `<checkpoint_dir>/step-<N>/` of shard files (checkpoint_file.h: one per (pipeline rank,
// tensor-parallel rank), written by that shard's first data-parallel replica, every tensor
// with its place in the unsplit tensor) and a manifest.json (checkpoint_manifest.h) written
// after every shard file is durable; `<checkpoint_dir>/latest` then names it. A crash leaves
// `latest` at the previous complete checkpoint. A reader assembles any shard of any tensor
// from the files that overlap it (checkpoint_reshard.h), whatever plan wrote them.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/checkpoint_file.h"
#include "trainer/checkpoint_manifest.h"

namespace strata {

inline constexpr char kManifestName[] = "manifest.json";

// "<dir>/step-<N>" and "step-<N>".
std::string CheckpointStepName(int64_t step);
std::string CheckpointStepDir(const std::string& dir, int64_t step);
// "shard-pp<p>-tp<t>.bin".
std::string ShardFileName(int pp_rank, int tp_rank);

// Writes `manifest` into `<dir>/<step name>/manifest.json` durably, then points `<dir>/latest`
// at that directory. Every file the manifest names must be durable already.
Status PublishCheckpoint(const std::string& dir, const CheckpointManifest& manifest);
// `<dir>/<name in latest>`, or empty when there is no `latest`.
std::string LatestCheckpoint(const std::string& dir);
// `where` itself if it is a checkpoint (it has a manifest), else the latest checkpoint of
// checkpoint_dir `where`; NotFound saying it is neither.
Result<std::string> ResolveCheckpoint(const std::string& where);

// An opened checkpoint: the manifest and every shard file's index (read and checked at Open),
// values read on demand. Safe for concurrent reads (each read opens its file).
class CheckpointReader {
 public:
  // Where each tensor is: its global shape and the shards that hold it.
  struct Source {
    int file = 0;   // index in files()
    int entry = 0;  // index in files()[file].entries()
  };
  struct TensorInfo {
    Shape global;
    std::vector<Source> sources;
  };

  // `path` is a checkpoint directory (with manifest.json), a checkpoint_dir (follows its
  // `latest`), or a full-model file (strata-ckpt to-full). Fails, naming the file, on a shard
  // file the manifest lists that is missing, of another size, or whose index is damaged; on
  // shards of one tensor that disagree on its global shape or split.
  static Result<CheckpointReader> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const CheckpointManifest& manifest() const { return manifest_; }
  const std::vector<ShardFile>& files() const { return files_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  // A full-model file: no manifest, so no whole-file checksum to check (its index and every
  // tensor carry their own).
  bool full_file() const { return full_file_; }

  // Reads shard `spec` of tensor `name` into `out` (spec.LocalShape() floats) from the shards
  // that overlap it, checking each one's checksum. NotFound when no file holds the tensor or
  // part of it; InvalidArgument when its global shape is not spec.global.
  Status Read(const std::string& name, const ShardSpec& spec, float* out) const;

 private:
  std::string path_;
  CheckpointManifest manifest_;
  std::vector<ShardFile> files_;
  std::map<std::string, TensorInfo> tensors_;
  bool full_file_ = false;
};

// Reads every target's shard into host staging, then copies all of them into the targets: on
// an error no target was written.
Status LoadShards(const CheckpointReader& reader, const std::vector<ShardTensor>& targets);

// Writes whole `tensors` as `<dir>/step-<m.step>/` (one shard file, the manifest `m` as of one
// process) and points `latest` at it; returns the step directory.
Result<std::string> WriteWholeCheckpoint(const std::string& dir, CheckpointManifest m,
                                         const std::vector<ShardTensor>& tensors);
// Every tensor of the checkpoint, whole, on the host (checksums checked).
Result<std::vector<ShardTensor>> ReadWhole(const CheckpointReader& reader);

// strata-ckpt's conversions. ToFullModel writes every tensor of the checkpoint unsplit into one
// file at `path` (the manifest, less its files, as the file's meta). FromFullModel writes such
// a file into `<dir>/step-<N>/` as a checkpoint of one shard and points `<dir>/latest` at it;
// returns the step directory.
Status ToFullModel(const CheckpointReader& reader, const std::string& path);
Result<std::string> FromFullModel(const std::string& full_path, const std::string& dir);

}  // namespace strata
