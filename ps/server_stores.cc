// server_stores.cc: TieredStores, the tiered kind of ServerStores (server_stores.h).
#include "ps/server_stores.h"

#include <filesystem>
#include <string_view>
#include <system_error>
#include <vector>

#include "offload/tiered_row_store.h"

namespace strata {
namespace {

constexpr std::string_view kTablePrefix = "table-";

StoreFactory TieredFactory(const ServerStoreOptions& c, const std::string& dir) {
  return [c, dir](const TableSpec& spec) -> Result<std::unique_ptr<RowStore>> {
    TieredStoreOptions o;
    o.path = dir + "/" + std::string(kTablePrefix) + std::to_string(spec.id);
    o.dram_budget_bytes = static_cast<uint64_t>(c.dram_budget_mb * 1048576.0);
    o.policy = c.policy;
    o.durability = c.durability;
    o.checkpoint_every_clocks = c.checkpoint_every_clocks;
    const int width = static_cast<int>(spec.RecordWidth());
    // Each DRAM shard must hold a record: a small budget (a dense table's few large chunks)
    // gets fewer shards, down to one.
    const uint64_t footprint = 4ull * static_cast<uint64_t>(width) + TieredRowStore::kRecordOverheadBytes;
    while (o.shards > 1 && o.dram_budget_bytes / static_cast<uint64_t>(o.shards) < footprint) o.shards /= 2;
    if (c.durability == Durability::kCheckpoint) {
      auto latest = TieredRowStore::LatestCheckpoint(o.path + "/checkpoints");
      if (latest.ok()) {
        STRATA_ASSIGN_OR_RETURN(auto store, TieredRowStore::OpenFromCheckpoint(*latest, o, width));
        return std::unique_ptr<RowStore>(std::move(store));
      }
      if (!latest.status().IsNotFound()) return latest.status();
      std::error_code ec;
      std::filesystem::remove_all(o.path + "/db", ec);
      if (ec) return Status::IOError("cannot clear " + o.path + "/db: " + ec.message());
    }
    STRATA_ASSIGN_OR_RETURN(auto store, TieredRowStore::Open(o, width));
    return std::unique_ptr<RowStore>(std::move(store));
  };
}

// Removes every <dir>/table-* (each table's RocksDB and checkpoints), whatever tables the
// caller knows of: a table of an earlier run that the new state lacks must not come back.
Status ClearTables(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return ec ? Status::IOError("cannot read " + dir + ": " + ec.message()) : Status::OK();
  std::vector<fs::path> gone;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().starts_with(kTablePrefix)) gone.push_back(it->path());
  }
  if (ec) return Status::IOError("cannot list " + dir + ": " + ec.message());
  for (const fs::path& p : gone) {
    fs::remove_all(p, ec);
    if (ec) return Status::IOError("cannot remove " + p.string() + ": " + ec.message());
  }
  return Status::OK();
}

}  // namespace

ServerStores TieredStores(const ServerStoreOptions& c, const std::string& dir) {
  ServerStores s;
  s.make = TieredFactory(c, dir);
  s.clear = [dir] { return ClearTables(dir); };
  s.backup = [c, dir](uint32_t shard) {
    const std::string copy = dir + "/backup-of-" + std::to_string(shard);
    ServerStores b;
    b.make = TieredFactory(c, copy);
    b.clear = [copy] { return ClearTables(copy); };
    return b;  // no backup of its own
  };
  return s;
}

}  // namespace strata
