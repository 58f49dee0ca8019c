// tiered_row_store_ids.cc: TieredRowStore's record of applied update ids (RowStore::UpdateWithId):
// a ring of RowStore::kRecordedIdsPerSender slots per sender in the column family
// strata_update_ids (format in store_format.h), written with the updates it names.
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <cstring>

#include "offload/internal/store_format.h"
#include "offload/internal/tiered_row_store_internal.h"
#include "offload/tiered_row_store.h"

namespace strata {

using offload_internal::DecodeUpdateIdSender;
using offload_internal::EncodeUpdateIdKey;
using offload_internal::kUpdateIdKeyBytes;

// The key's slot is the id's low 16 bits.
static_assert(RowStore::kRecordedIdsPerSender == 1 << 16);

namespace {
uint16_t IdSlot(uint64_t id) { return static_cast<uint16_t>(id % RowStore::kRecordedIdsPerSender); }
}  // namespace

void TieredRowStore::PutUpdateId(rocksdb::WriteBatch& batch, UpdateId id) {
  char key[kUpdateIdKeyBytes];
  EncodeUpdateIdKey(id.sender, id.id, key);
  batch.Put(ids_cf_, rocksdb::Slice(key, kUpdateIdKeyBytes),
            rocksdb::Slice(reinterpret_cast<const char*>(&id.id), sizeof(id.id)));
}

void TieredRowStore::KeepUnwrittenId(UpdateId id) {
  std::lock_guard lock(ids_mu_);
  unwritten_ids_[{id.sender, IdSlot(id.id)}] = id.id;
}

size_t TieredRowStore::PutUnwrittenIdsLocked(rocksdb::WriteBatch& batch) {
  std::lock_guard lock(ids_mu_);
  for (const auto& [slot, id] : unwritten_ids_) PutUpdateId(batch, UpdateId{slot.first, id});
  return unwritten_ids_.size();
}

void TieredRowStore::ClearUnwrittenIdsLocked() {
  std::lock_guard lock(ids_mu_);
  unwritten_ids_.clear();
}

Result<std::vector<UpdateId>> TieredRowStore::RecordedUpdateIds() const {
  std::shared_lock barrier(barrier_mu_);
  if (closed_) return Status::FailedPrecondition("tiered store " + options_.path + " is closed");
  std::map<std::pair<uint32_t, uint16_t>, uint64_t> ids;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), ids_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (it->key().size() != kUpdateIdKeyBytes || it->value().size() != sizeof(uint64_t)) {
      return Status::Corruption("tiered store " + options_.path + ": malformed update id entry (" +
                                std::to_string(it->key().size()) + "-byte key, " +
                                std::to_string(it->value().size()) + "-byte value)");
    }
    uint64_t id = 0;
    std::memcpy(&id, it->value().data(), sizeof(id));
    ids[{DecodeUpdateIdSender(it->key().data()), IdSlot(id)}] = id;
  }
  STRATA_RETURN_IF_ERROR(
      offload_internal::FromRocks(it->status(), "scan update ids in " + options_.path));
  {
    std::lock_guard lock(ids_mu_);
    for (const auto& [slot, id] : unwritten_ids_) ids[slot] = id;
  }
  std::vector<UpdateId> out;
  out.reserve(ids.size());
  for (const auto& [slot, id] : ids) out.push_back(UpdateId{slot.first, id});
  return out;
}

}  // namespace strata
