// server_load_save.cc: PsServer and checkpoints: writing its shard of every table into a
// trainer checkpoint (saveTables), and serving a checkpoint read-only, re-sharded by key for
// this cluster's server count (LoadCheckpoint).
#include <spdlog/spdlog.h>

#include "ps/server.h"
#include "ps/server_checkpoint.h"
#include "ps/server_table.h"

namespace strata {
namespace {

// What must agree between a trainer's table and the served one: the layout of the records.
std::string Layout(const TableSpec& s) {
  return "\"" + s.name + "\", " +
         (s.kind == TableKind::kSparse ? "sparse dim " + std::to_string(s.dim)
                                       : "dense " + std::to_string(s.numel) + " floats in chunks of " +
                                             std::to_string(s.chunk_floats));
}

}  // namespace

void PsServer::HandleSaveTables(Request& request) {
  const std::string checkpoint = request.message().reader().getBody().getSaveTables().cStr();
  const uint32_t rank = Shard();  // a backup that took over writes the shard it serves
  const auto servers = static_cast<uint32_t>(node_.view().Count(Role::kServer));
  Status s;
  size_t count = 0;
  {
    std::shared_lock lock(tables_mu_);
    std::vector<TableShard> tables;
    for (const auto& [id, t] : tables_) tables.push_back({&t->spec, t->store.get()});
    count = tables.size();
    s = WriteServerShard(checkpoint, rank, servers, tables);
  }
  if (!s.ok()) {
    ++errors_;
    spdlog::error("server: saving the tables into {}: {}", checkpoint, s.ToString());
    return request.ReplyError(s.WithContext("server " + std::to_string(rank)));
  }
  spdlog::info("server: {} tables saved into {}", count, ServerTablesDir(checkpoint));
  request.Reply(request.MakeReply());
}

Status PsServer::LoadCheckpoint(const std::string& checkpoint, uint32_t rank, uint32_t servers) {
  STRATA_ASSIGN_OR_RETURN(LoadedShards loaded, ReadServerShards(checkpoint, rank, servers));
  // Built aside and added together: a failure leaves the server without any of them.
  std::map<uint32_t, std::unique_ptr<Table>> made;
  std::unique_lock lock(tables_mu_);
  if (!tables_.empty()) return Status::FailedPrecondition("serving " + checkpoint + ": the server already has tables");
  for (const LoadedTable& lt : loaded.tables) {
    auto t = MakeTableLocked(lt.spec);
    if (!t.ok()) return t.status().WithContext("loading table \"" + lt.spec.name + "\" of " + checkpoint);
    const auto width = static_cast<size_t>(lt.spec.RecordWidth());
    STRATA_RETURN_IF_ERROR((*t)->store->Update(lt.keys, (*t)->init, [&](size_t i, std::span<float> record) {
      std::copy_n(lt.records.data() + i * width, width, record.begin());
    }).WithContext("loading table \"" + lt.spec.name + "\" of " + checkpoint));
    made.emplace(lt.spec.id, std::move(t).value());
  }
  tables_ = std::move(made);
  serving_ = checkpoint;
  loaded_rows_ = loaded.rows;
  spdlog::info("server {} of {}: serving {} read-only (written by {} servers): {} tables, {} rows", rank, servers,
               checkpoint, loaded.written_by, tables_.size(), loaded.rows);
  return Status::OK();
}

Result<TableSpec> PsServer::ServedTable(const TableSpec& spec) const {
  std::shared_lock lock(tables_mu_);
  auto it = tables_.find(spec.id);
  if (it == tables_.end()) {
    std::string held;
    for (const auto& [id, t] : tables_) held += (held.empty() ? "" : ", ") + std::to_string(id) + " \"" + t->spec.name + "\"";
    return Status::NotFound("table " + std::to_string(spec.id) + " \"" + spec.name + "\" is not in the served checkpoint " +
                            serving_ + " (it holds " + (held.empty() ? "no tables" : held) + ")");
  }
  if (Layout(it->second->spec) != Layout(spec)) {
    return Status::InvalidArgument("table " + std::to_string(spec.id) + ": this job's is " + Layout(spec) +
                                   ", the served checkpoint " + serving_ + " has " + Layout(it->second->spec));
  }
  return it->second->spec;
}

}  // namespace strata
