// server_stats.cc: PsServer's statistics (getStats JSON, the log line).
#include "ps/server.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "ps/server_table.h"

namespace strata {

std::string PsServer::StatsJson() const {
  nlohmann::json j;
  j["uptime_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  j["requests"] = requests_.load();
  j["pushes"] = pushes_.load();
  j["pulls"] = pulls_.load();
  j["pulls_on_receive"] = pulls_on_receive_.load();
  j["keys_pushed"] = keys_pushed_.load();
  j["keys_pulled"] = keys_pulled_.load();
  j["bytes_in"] = bytes_in_.load();
  j["bytes_out"] = bytes_out_.load();
  j["apply_ms"] = apply_ns_.load() / 1e6;
  j["errors"] = errors_.load();
  j["duplicate_pushes"] = duplicates_.load();
  j["dead_trainer_keys_dropped"] = bsp_dropped_.load();
  j["layout_servers"] = KeyLayout().servers;
  j["rows_moved_in"] = rows_moved_in_.load();
  j["rows_moved_out"] = rows_moved_out_.load();
  j["migrate_chunks_in"] = migrate_chunks_in_.load();
  j["migrate_asks_again"] = migrate_asks_again_.load();
  j["joins_rolled_back"] = joins_rolled_back_.load();
  j["migrate_chunks_out"] = migrate_chunks_out_.load();
  j["layout_left"] = KeyLayout().left;
  j["rows_erased"] = rows_erased_.load();
  j["moved_refused"] = moved_refused_.load();
  j["bsp_moved_in"] = bsp_moved_in_.load();  // BSP accumulations that came with rows (late: of a clock applied here)
  j["bsp_moved_out"] = bsp_moved_out_.load();
  j["bsp_applied_late"] = bsp_applied_late_.load();
  j["queue_depth"] = queued_.load();
  if (options_.replication == Replication::kBackup) {
    // As primary: updates forwarded to the backup and acknowledged, their payload bytes, and
    // forwards that failed while the backup was still up. The backup copy's own statistics.
    j["shard"] = Shard();
    const ShardRole role = role_.load();
    j["role"] = role == ShardRole::kServing ? "serving" : role == ShardRole::kBackup ? "backup" : role == ShardRole::kEmpty ? "empty" : "unknown";
    j["forwarded"] = forwards_.load();
    j["transferred_rows"] = transferred_rows_.load();
    j["replicated_bytes"] = replicated_bytes_.load();
    j["forward_errors"] = forward_errors_.load();
    j["copy_asks_again"] = copy_asks_again_.load();
    j["copy_window_max"] = copy_window_max_.load();  // chunks of a copy sent, not yet acknowledged
    j["forwards_while_installing"] = forwards_while_installing_.load();
    j["diverged_copies"] = diverged_copies_.load();
    j["fail_backs"] = fail_backs_.load();  // shards handed back to their own server, or taken back
    std::lock_guard lock(backup_mu_);
    if (backup_) j["backup"] = nlohmann::json::parse(backup_->StatsJson());
  }
  if (!serving_.empty()) {
    j["serving"] = serving_;
    j["loaded_rows"] = loaded_rows_;
  }
  nlohmann::json tables = nlohmann::json::array();
  {
    std::shared_lock lock(tables_mu_);
    for (const auto& [id, t] : tables_) {
      const RowStoreStats s = t->store->stats();
      tables.push_back({{"id", id}, {"name", t->spec.name}, {"records", s.records},
                        {"bytes_in_memory", s.bytes_in_memory}, {"hits", s.hits}, {"misses", s.misses}});
    }
  }
  j["tables"] = tables;
  {
    std::lock_guard lock(clock_mu_);
    j["parked_pulls"] = parked_.size();
    j["parked_refused"] = parked_quota_.refused();
    nlohmann::json clocks;
    for (const auto& [id, c] : trainer_clock_) clocks[std::to_string(id)] = c;
    j["trainer_clocks"] = clocks;
  }
  return j.dump();
}

PsServer::Timings PsServer::ReadTimings() const {
  Timings t;
  t.pull_seconds = pull_seconds_.Read();
  t.push_seconds = push_seconds_.Read();
  t.save_seconds = save_seconds_.Read();
  std::shared_lock lock(tables_mu_);
  for (const auto& [id, table] : tables_) t.tables[table->spec.name] = table->store->stats();
  return t;
}

std::string PsServer::StatsLine() const {
  const double up = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const double requests = static_cast<double>(requests_.load());
  std::string line = fmt::format(
      "{} pulls, {} pushes ({:.0f} requests/s), keys {} pulled / {} pushed, {:.1f} MiB in / {:.1f} MiB out, "
      "apply {:.1f} s, queue {}, errors {}, retried pushes not applied again {}",
      pulls_.load(), pushes_.load(), up > 0 ? requests / up : 0.0, keys_pulled_.load(), keys_pushed_.load(),
      bytes_in_.load() / 1048576.0, bytes_out_.load() / 1048576.0, apply_ns_.load() / 1e9, queued_.load(),
      errors_.load(), duplicates_.load());
  if (!serving_.empty()) line = fmt::format("serving {} read-only ({} rows loaded): ", serving_, loaded_rows_) + line;
  if (options_.replication == Replication::kBackup) {
    line += fmt::format(", {} updates replicated to the backup ({:.1f} MiB)", forwards_.load(),
                        replicated_bytes_.load() / 1048576.0);
    std::lock_guard lock(backup_mu_);
    if (backup_) line += fmt::format("; backup of shard {}: {}", backup_->Shard(), backup_->StatsLine());
  }
  std::shared_lock lock(tables_mu_);
  // The stores together: how often a record was resident, and what the misses read from the
  // lower tier (a miss loads, or creates, one whole record).
  uint64_t hits = 0, misses = 0, miss_bytes = 0, resident = 0, records = 0;
  std::string tables;
  for (const auto& [id, t] : tables_) {
    const RowStoreStats st = t->store->stats();
    hits += st.hits;
    misses += st.misses;
    miss_bytes += st.misses * static_cast<uint64_t>(t->spec.RecordWidth()) * sizeof(float);
    resident += st.bytes_in_memory;
    records += st.records;
    tables += fmt::format("; {}: {} rows, {:.1f} MiB in DRAM", t->spec.name, st.records, st.bytes_in_memory / 1048576.0);
  }
  if (hits + misses > 0) {
    line += fmt::format(", store hit rate {:.1f}% ({} hits, {} misses), {:.1f} MiB read by misses ({:.1f} MiB/s over {:.1f} s), "
                        "{} bytes resident in DRAM",
                        100.0 * static_cast<double>(hits) / static_cast<double>(hits + misses), hits, misses,
                        miss_bytes / 1048576.0, up > 0 ? miss_bytes / 1048576.0 / up : 0.0, up, resident);
  }
  if (read_ahead_.records_read() > 0) {
    line += fmt::format(", {} records read ahead of their pulls", read_ahead_.records_read());
  }
  if (!serving_.empty()) tables += fmt::format("; rows added since loading {}",
                                              static_cast<int64_t>(records) - static_cast<int64_t>(loaded_rows_));
  return line + tables;
}

// Periodic statistics are for whoever turned log.level to debug; the JSON stays on getStats.
void PsServer::LogStats() { spdlog::debug("server stats: {}", StatsLine()); }

}  // namespace strata
