// tiered_row_store_files.cc: TieredRowStore's files: writing dirty records back, checkpoints
// (RocksDB checkpoint + manifest) and restoring them, table export and import.
#include <rocksdb/db.h>
#include <rocksdb/utilities/checkpoint.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "common/file.h"
#include "offload/internal/store_format.h"
#include "offload/internal/tiered_row_store_internal.h"
#include "offload/tiered_row_store.h"

namespace strata {

namespace fs = std::filesystem;
using offload_internal::CachedRecord;
using offload_internal::EncodeKey;
using offload_internal::FromRocks;

namespace {
constexpr size_t kFlushBatchBytes = 8 << 20;
constexpr const char* kAutoPrefix = "clock-";

Status FsError(std::string_view what, const fs::path& p, const std::error_code& ec) {
  return Status::IOError(std::string(what) + " " + p.string() + ": " + ec.message());
}
}  // namespace

// Writes every dirty record to RocksDB (caller holds barrier_mu_ exclusively: no record is busy).
Status TieredRowStore::FlushDirtyLocked() {
  rocksdb::WriteBatch batch;
  std::vector<CachedRecord*> pending;
  char key[8];
  auto write = [&]() -> Status {
    if (batch.Count() == 0) return Status::OK();
    STRATA_RETURN_IF_ERROR(WriteBatchToDb(batch, true).WithContext("write back dirty records"));
    for (CachedRecord* r : pending) r->dirty = false;
    written_back_ += pending.size();
    pending.clear();
    batch.Clear();
    return Status::OK();
  };
  for (auto& sp : shards_) {
    std::lock_guard lock(sp->mu);
    for (auto& [k, r] : sp->map) {
      if (!r.dirty) continue;
      EncodeKey(k, key);
      batch.Put(records_cf_, rocksdb::Slice(key, 8),
                rocksdb::Slice(reinterpret_cast<const char*>(r.data), record_bytes_));
      pending.push_back(&r);
      if (batch.GetDataSize() >= kFlushBatchBytes) STRATA_RETURN_IF_ERROR(write());
    }
  }
  // The ids of the updates applied so far, with the last records (a checkpoint copies the
  // database only after the whole write-back).
  if (PutUnwrittenIdsLocked(batch) == 0) return write();
  STRATA_RETURN_IF_ERROR(write());
  ClearUnwrittenIdsLocked();
  return Status::OK();
}

void TieredRowStore::SetCheckpointMetadata(std::string metadata) {
  std::lock_guard lock(metadata_mu_);
  metadata_ = std::move(metadata);
}

std::string TieredRowStore::checkpoint_metadata() const {
  std::lock_guard lock(metadata_mu_);
  return metadata_;
}

Status TieredRowStore::Checkpoint(const std::string& dir) {
  std::unique_lock barrier(barrier_mu_);
  if (closed_) return Status::FailedPrecondition("tiered store " + options_.path + " is closed");
  return CheckpointLocked(dir).WithContext("checkpoint to " + dir);
}

Status TieredRowStore::CheckpointLocked(const std::string& dir) {
  const auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec)) {
    return Status::AlreadyExists("checkpoint directory " + dir + " is not empty");
  }
  fs::create_directories(dir, ec);
  if (ec) return FsError("cannot create", dir, ec);
  STRATA_RETURN_IF_ERROR(FlushDirtyLocked());
  rocksdb::Checkpoint* raw = nullptr;
  STRATA_RETURN_IF_ERROR(FromRocks(rocksdb::Checkpoint::Create(db_.get(), &raw), "RocksDB checkpoint"));
  std::unique_ptr<rocksdb::Checkpoint> cp(raw);
  // log_size_for_flush = 0: always flush the memtables, so the copy needs no WAL.
  STRATA_RETURN_IF_ERROR(FromRocks(cp->CreateCheckpoint(dir + "/db", 0), "RocksDB checkpoint"));

  offload_internal::CheckpointManifest m;
  m.width = width_;
  m.clock = clock_.load();
  m.records = records_.load();
  m.metadata = checkpoint_metadata();
  for (fs::recursive_directory_iterator it(dir + "/db", ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    m.files.emplace_back(fs::relative(it->path(), dir).string(), it->file_size());
  }
  if (ec) return FsError("cannot list", dir + "/db", ec);
  std::sort(m.files.begin(), m.files.end());
  STRATA_RETURN_IF_ERROR(WriteFileDurably(
      dir + "/" + offload_internal::kManifestName, offload_internal::EncodeManifest(m)));
  ++checkpoints_;
  checkpoint_seconds_.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return Status::OK();
}

std::string TieredRowStore::AutoCheckpointDir(uint64_t clock) const {
  const std::string root = options_.checkpoint_dir.empty() ? options_.path + "/checkpoints"
                                                           : options_.checkpoint_dir;
  char name[48];
  std::snprintf(name, sizeof(name), "%s%020llu", kAutoPrefix, static_cast<unsigned long long>(clock));
  return root + "/" + name;
}

namespace {
// The automatic checkpoint directories under `root`, oldest first.
std::vector<fs::path> AutoCheckpoints(const fs::path& root) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind(kAutoPrefix, 0) == 0) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Reads and checks a checkpoint's manifest and files.
Result<offload_internal::CheckpointManifest> CheckCheckpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::NotFound("no checkpoint at " + dir);
  const std::string path = dir + "/" + offload_internal::kManifestName;
  auto text = ReadWholeFile(path);
  if (!text.ok()) {
    if (text.status().IsNotFound()) {
      return Status::Corruption("incomplete checkpoint " + dir + ": no " +
                                offload_internal::kManifestName);
    }
    return text.status();
  }
  STRATA_ASSIGN_OR_RETURN(auto m, offload_internal::DecodeManifest(*text, path));
  for (const auto& [name, size] : m.files) {
    const fs::path file = fs::path(dir) / name;
    const uint64_t got = fs::file_size(file, ec);
    if (ec) return Status::Corruption("checkpoint " + dir + ": missing file " + name);
    if (got != size) {
      return Status::Corruption("checkpoint " + dir + ": " + name + " has " + std::to_string(got) +
                                " bytes, the manifest says " + std::to_string(size));
    }
  }
  return m;
}
}  // namespace

Status TieredRowStore::PruneCheckpoints() {
  const std::string root = fs::path(AutoCheckpointDir(0)).parent_path().string();
  std::vector<fs::path> all = AutoCheckpoints(root);
  const size_t keep = static_cast<size_t>(options_.checkpoints_to_keep);
  for (size_t i = 0; i + keep < all.size(); ++i) {
    std::error_code ec;
    fs::remove_all(all[i], ec);
    if (ec) return FsError("cannot remove old checkpoint", all[i], ec);
  }
  return Status::OK();
}

Result<std::string> TieredRowStore::LatestCheckpoint(const std::string& dir) {
  std::vector<fs::path> all = AutoCheckpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    auto checked = CheckCheckpoint(it->string());
    if (checked.ok()) return it->string();
    // Skip a damaged or incomplete checkpoint, but refuse one of another format version rather
    // than fall back past it (or, with none left, start empty).
    if (checked.status().code() == StatusCode::kFailedPrecondition) return checked.status();
  }
  return Status::NotFound("no complete checkpoint under " + dir);
}

Result<std::unique_ptr<TieredRowStore>> TieredRowStore::OpenFromCheckpoint(
    const std::string& checkpoint_dir, const TieredStoreOptions& options, int width) {
  STRATA_RETURN_IF_ERROR(ValidateTieredStoreOptions(options, width));
  STRATA_ASSIGN_OR_RETURN(auto m, CheckCheckpoint(checkpoint_dir));
  if (m.width != width) {
    return Status::InvalidArgument("checkpoint " + checkpoint_dir + " has records of " +
                                   std::to_string(m.width) + " floats, expected " + std::to_string(width));
  }
  // Copy aside first, then swap, so a failed copy leaves the old store in place.
  const fs::path db = fs::path(options.path) / "db";
  const fs::path tmp = fs::path(options.path) / "db.restoring";
  std::error_code ec;
  fs::create_directories(options.path, ec);
  if (ec) return FsError("cannot create store directory", options.path, ec);
  fs::remove_all(tmp, ec);
  fs::copy(fs::path(checkpoint_dir) / "db", tmp, fs::copy_options::recursive, ec);
  if (ec) return FsError("cannot copy checkpoint into", tmp, ec);
  fs::remove_all(db, ec);
  if (ec) return FsError("cannot remove", db, ec);
  fs::rename(tmp, db, ec);
  if (ec) return FsError("cannot rename into", db, ec);
  STRATA_ASSIGN_OR_RETURN(auto store, Open(options, width));
  store->clock_.store(m.clock);
  store->records_.store(m.records);
  store->SetCheckpointMetadata(std::move(m.metadata));
  return store;
}

Status TieredRowStore::Scan(const ScanVisit& visit) {
  std::unique_lock barrier(barrier_mu_);
  if (closed_) return Status::FailedPrecondition("tiered store " + options_.path + " is closed");
  STRATA_RETURN_IF_ERROR(FlushDirtyLocked().WithContext("scan of " + options_.path));
  // Everything is in RocksDB now: iterate a snapshot while calls continue.
  const rocksdb::Snapshot* snapshot = db_->GetSnapshot();
  barrier.unlock();
  std::shared_lock shared(barrier_mu_);
  struct Release {
    rocksdb::DB* db;
    const rocksdb::Snapshot* s;
    ~Release() { db->ReleaseSnapshot(s); }
  } release{db_.get(), snapshot};
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, records_cf_));
  std::vector<float> record(width_);
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (it->key().size() != 8 || it->value().size() != record_bytes_) {
      return Status::Corruption("tiered store " + options_.path + ": malformed record on disk");
    }
    std::memcpy(record.data(), it->value().data(), record_bytes_);
    STRATA_RETURN_IF_ERROR(visit(offload_internal::DecodeKey(it->key().data()), record));
  }
  return FromRocks(it->status(), "scan of " + options_.path);
}

Status TieredRowStore::Export(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(auto writer, offload_internal::ExportWriter::Create(path, width_));
  STRATA_RETURN_IF_ERROR(Scan([&](uint64_t key, std::span<const float> record) { return writer->Add(key, record.data()); })
                             .WithContext("export to " + path));
  return writer->Finish();
}

Status TieredRowStore::Import(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(auto file, offload_internal::ExportReader::Open(path, width_));
  std::unique_lock barrier(barrier_mu_);
  if (closed_) return Status::FailedPrecondition("tiered store " + options_.path + " is closed");
  const bool wal = options_.durability == Durability::kWal;
  rocksdb::WriteBatch batch;
  char key[8];
  const uint64_t clock = clock_.load();
  for (uint64_t i = 0; i < file.count(); ++i) {
    const uint64_t k = file.key(i);
    const float* rec = file.record(i);
    Shard& s = ShardOf(k);
    bool resident = false;
    {
      std::lock_guard lock(s.mu);
      if (auto it = s.map.find(k); it != s.map.end()) {
        std::memcpy(it->second.data, rec, record_bytes_);
        it->second.dirty = !wal;
        it->second.last_clock = clock;
        resident = true;
      }
    }
    if (!resident || wal) {
      EncodeKey(k, key);
      batch.Put(records_cf_, rocksdb::Slice(key, 8),
                rocksdb::Slice(reinterpret_cast<const char*>(rec), record_bytes_));
      if (options_.expire_after_clocks > 0) {
        batch.Put(clocks_cf_, rocksdb::Slice(key, 8), rocksdb::Slice(reinterpret_cast<const char*>(&clock), 8));
      }
    }
    if (batch.GetDataSize() >= kFlushBatchBytes || i + 1 == file.count()) {
      STRATA_RETURN_IF_ERROR(WriteBatchToDb(batch, true).WithContext("import " + path));
      batch.Clear();
    }
  }
  uint64_t keys = 0;
  db_->GetIntProperty(records_cf_, rocksdb::DB::Properties::kEstimateNumKeys, &keys);
  records_.store(std::max(keys, records_.load()));
  return Status::OK();
}

}  // namespace strata
