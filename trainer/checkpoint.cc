// checkpoint.cc: publishing a checkpoint directory, CheckpointReader (resharding reads),
// LoadShards (staging, then commit) and the full-model conversions.
#include "trainer/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/file.h"
#include "trainer/checkpoint_reshard.h"

namespace strata {
namespace fs = std::filesystem;

std::string CheckpointStepName(int64_t step) { return "step-" + std::to_string(step); }

std::string CheckpointStepDir(const std::string& dir, int64_t step) {
  return dir + "/" + CheckpointStepName(step);
}

std::string ShardFileName(int pp_rank, int tp_rank) {
  return "shard-pp" + std::to_string(pp_rank) + "-tp" + std::to_string(tp_rank) + ".bin";
}

Status PublishCheckpoint(const std::string& dir, const CheckpointManifest& manifest) {
  const std::string name = CheckpointStepName(manifest.step);
  STRATA_RETURN_IF_ERROR(WriteFileDurably(dir + "/" + name + "/" + kManifestName, manifest.ToJson()));
  return WriteFileDurably(dir + "/latest", name + "\n");
}

std::string LatestCheckpoint(const std::string& dir) {
  std::ifstream in(dir + "/latest");
  std::string name;
  if (!in || !std::getline(in, name) || name.empty()) return "";
  return dir + "/" + name;
}

Result<std::string> ResolveCheckpoint(const std::string& where) {
  std::error_code ec;
  if (fs::exists(where + "/" + kManifestName, ec)) return where;
  const std::string latest = LatestCheckpoint(where);
  if (latest.empty()) {
    return Status::NotFound(where + ": neither a checkpoint (no " + kManifestName + ") nor a checkpoint_dir (no latest)");
  }
  return latest;
}

Result<CheckpointReader> CheckpointReader::Open(const std::string& path) {
  CheckpointReader r;
  r.path_ = path;
  std::error_code ec;
  if (fs::is_directory(path, ec) && !fs::exists(path + "/" + kManifestName, ec)) {
    const std::string latest = LatestCheckpoint(path);
    if (latest.empty()) {
      return Status::NotFound(path + ": neither a checkpoint (no " + kManifestName + ") nor a checkpoint_dir (no latest)");
    }
    return Open(latest);
  }
  if (!fs::exists(path, ec)) return Status::NotFound("no checkpoint at " + path);
  if (!fs::is_directory(path, ec)) {
    // A full-model file, or an older per-rank file (which Open refuses, naming its format).
    STRATA_ASSIGN_OR_RETURN(ShardFile file, ShardFile::Open(path));
    STRATA_ASSIGN_OR_RETURN(r.manifest_, CheckpointManifest::FromJson(file.meta(), path + " (its meta)"));
    r.manifest_.files = {{fs::path(path).filename().string(), {file.size(), 0}}};
    r.full_file_ = true;
    r.files_.push_back(std::move(file));
  } else {
    STRATA_ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(path + "/" + kManifestName));
    STRATA_ASSIGN_OR_RETURN(r.manifest_, CheckpointManifest::FromJson(text, path + "/" + kManifestName));
    for (const CheckpointManifest::File& f : r.manifest_.files) {
      const std::string file_path = path + "/" + f.name;
      if (!fs::exists(file_path, ec)) {
        return Status::NotFound(path + ": shard file " + f.name + " (listed in " + kManifestName + ") is missing");
      }
      STRATA_ASSIGN_OR_RETURN(ShardFile file, ShardFile::Open(file_path));
      if (file.size() != f.digest.bytes) {
        return Status::Corruption(file_path + ": " + std::to_string(file.size()) + " bytes, " + kManifestName +
                                  " says " + std::to_string(f.digest.bytes) + " (truncated?)");
      }
      r.files_.push_back(std::move(file));
    }
  }
  for (int fi = 0; fi < static_cast<int>(r.files_.size()); ++fi) {
    const auto& entries = r.files_[fi].entries();
    for (int ei = 0; ei < static_cast<int>(entries.size()); ++ei) {
      const TensorEntry& e = entries[ei];
      auto [it, fresh] = r.tensors_.try_emplace(e.name, TensorInfo{e.spec.global, {}});
      if (!fresh) {
        // Every shard of a tensor describes the same unsplit tensor and the same split, so
        // that distinct shards are disjoint and a reader can count what it covered.
        const TensorEntry& first = r.files_[it->second.sources[0].file].entries()[it->second.sources[0].entry];
        const bool same_split = e.spec.whole() || first.spec.whole() ||
                                (e.spec.axis == first.spec.axis && e.spec.blocks == first.spec.blocks &&
                                 e.spec.parts == first.spec.parts);
        if (e.spec.global != it->second.global || !same_split) {
          return Status::Corruption(path + ": " + e.name + " is " + ShapeToString(e.spec.global) + " (" +
                                    e.spec.ToString() + ") in " + r.files_[fi].path() + " but " +
                                    ShapeToString(first.spec.global) + " (" + first.spec.ToString() + ") in " +
                                    r.files_[it->second.sources[0].file].path());
        }
      }
      it->second.sources.push_back({fi, ei});
    }
  }
  return r;
}

Status CheckpointReader::Read(const std::string& name, const ShardSpec& spec, float* out) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return Status::NotFound(path_ + ": no shard file holds " + name + " (a checkpoint of another model or optimizer?)");
  }
  const TensorInfo& info = it->second;
  const TensorEntry& first = files_[info.sources[0].file].entries()[info.sources[0].entry];
  if (info.global != spec.global) {
    return Status::InvalidArgument(path_ + ": " + name + " has global shape " + ShapeToString(info.global) + " in " +
                                   files_[info.sources[0].file].path() + "; the model's is " +
                                   ShapeToString(spec.global));
  }
  STRATA_RETURN_IF_ERROR(spec.Validate(name));
  // The shards to read: one with exactly this spec, else a whole one, else every distinct
  // shard that overlaps it.
  std::vector<Source> use;
  for (const Source& s : info.sources) {
    const ShardSpec& have = files_[s.file].entries()[s.entry].spec;
    if (have == spec) use = {s};
  }
  for (const Source& s : info.sources) {
    if (use.empty() && files_[s.file].entries()[s.entry].spec.whole()) use = {s};
  }
  if (use.empty()) {
    for (const Source& s : info.sources) {
      const ShardSpec& have = files_[s.file].entries()[s.entry].spec;
      bool seen = false;
      for (const Source& u : use) seen = seen || files_[u.file].entries()[u.entry].spec == have;
      if (!seen && ShardsOverlap(have, spec)) use.push_back(s);
    }
  }
  int64_t numel = 1, copied = 0;
  for (int64_t d : spec.LocalShape()) numel *= d;
  std::vector<float> buf;
  for (const Source& s : use) {
    const TensorEntry& e = files_[s.file].entries()[s.entry];
    if (e.spec == spec) return files_[s.file].Read(e, out);
    buf.resize(e.bytes / sizeof(float));
    STRATA_RETURN_IF_ERROR(files_[s.file].Read(e, buf.data()));
    copied += CopyShardOverlap(e.spec, buf.data(), spec, out);
  }
  if (copied != numel) {
    return Status::NotFound(path_ + ": the shards of " + name + " (split " + first.spec.ToString() + ") cover " +
                            std::to_string(copied) + " of the " + std::to_string(numel) + " elements of " +
                            spec.ToString() + ": a shard file is missing");
  }
  return Status::OK();
}

Status LoadShards(const CheckpointReader& reader, const std::vector<ShardTensor>& targets) {
  std::vector<std::vector<float>> staged(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    const ShardTensor& t = targets[i];
    if (t.value.shape() != t.spec.LocalShape()) {
      return Status::Internal(t.name + ": tensor " + ShapeToString(t.value.shape()) + " is not shard " +
                              t.spec.ToString() + " of " + ShapeToString(t.spec.global));
    }
    staged[i].resize(static_cast<size_t>(t.value.numel()));
    STRATA_RETURN_IF_ERROR(reader.Read(t.name, t.spec, staged[i].data()));
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    const Tensor host = Tensor::FromBlob(staged[i].data(), targets[i].value.shape(), DType::kF32, Device::CPU(), nullptr);
    Tensor dst = targets[i].value;  // a handle: copies into the target's storage
    STRATA_RETURN_IF_ERROR(dst.CopyFrom(host).WithContext("loading " + targets[i].name));
  }
  return Status::OK();
}

Result<std::vector<ShardTensor>> ReadWhole(const CheckpointReader& reader) {
  std::vector<ShardTensor> out;
  for (const auto& [name, info] : reader.tensors()) {
    ShardTensor t{name, ShardSpec::Whole(info.global), Tensor()};
    auto numel = ShapeNumel(info.global);
    STRATA_RETURN_IF_ERROR(numel.status());
    auto storage = std::make_shared<std::vector<float>>(static_cast<size_t>(*numel));
    STRATA_RETURN_IF_ERROR(reader.Read(name, t.spec, storage->data()));
    t.value = Tensor::FromBlob(storage->data(), info.global, DType::kF32, Device::CPU(), storage);
    out.push_back(std::move(t));
  }
  return out;
}


Status ToFullModel(const CheckpointReader& reader, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(const std::vector<ShardTensor> tensors, ReadWhole(reader));
  CheckpointManifest meta = reader.manifest();
  meta.files.clear();
  return WriteShardFile(path, meta.ToJson(), tensors).status();
}

Result<std::string> FromFullModel(const std::string& full_path, const std::string& dir) {
  std::error_code ec;
  if (fs::is_directory(full_path, ec)) return Status::InvalidArgument(full_path + " is a directory, not a full-model file");
  STRATA_ASSIGN_OR_RETURN(const CheckpointReader reader, CheckpointReader::Open(full_path));
  for (const ShardFile& f : reader.files()) {
    for (const TensorEntry& e : f.entries()) {
      if (!e.spec.whole()) return Status::InvalidArgument(full_path + ": " + e.name + " is split (" + e.spec.ToString() + "): not a full-model file");
    }
  }
  STRATA_ASSIGN_OR_RETURN(const std::vector<ShardTensor> tensors, ReadWhole(reader));
  CheckpointManifest m = reader.manifest();
  m.plan = "from-full " + fs::path(full_path).filename().string();
  return WriteWholeCheckpoint(dir, std::move(m), tensors);
}

Result<std::string> WriteWholeCheckpoint(const std::string& dir, CheckpointManifest m,
                                         const std::vector<ShardTensor>& tensors) {
  m.dp = m.tp = m.pp = m.vpp = 1;
  const std::string step_dir = CheckpointStepDir(dir, m.step);
  std::error_code ec;
  fs::create_directories(step_dir, ec);
  if (ec) return Status::IOError("cannot create " + step_dir + ": " + ec.message());
  const std::string name = ShardFileName(0, 0);
  STRATA_ASSIGN_OR_RETURN(const FileDigest digest,
                          WriteShardFile(step_dir + "/" + name, nlohmann::json{{"step", m.step}}.dump(), tensors));
  m.files = {{name, digest}};
  STRATA_RETURN_IF_ERROR(PublishCheckpoint(dir, m));
  return step_dir;
}

}  // namespace strata
