// server_checkpoint.cc: writing a server's shard of its tables into a checkpoint, and reading
// every shard back re-sharded by key.
#include "ps/server_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <regex>

#include "common/file.h"
#include "offload/row_file.h"
#include "ps/table_file.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string ShardPrefix(const std::string& checkpoint, uint32_t rank, uint32_t servers) {
  return ServerTablesDir(checkpoint) + "/server-" + std::to_string(rank) + "-of-" + std::to_string(servers);
}
std::string TablesPath(const std::string& checkpoint, uint32_t rank, uint32_t servers) {
  return ShardPrefix(checkpoint, rank, servers) + ".tables";
}
std::string RowsPath(const std::string& checkpoint, uint32_t rank, uint32_t servers, uint32_t table) {
  return ShardPrefix(checkpoint, rank, servers) + ".table-" + std::to_string(table) + ".rows";
}

// The server of `servers` that holds record `key` of `spec`.
uint32_t Owner(const TableSpec& spec, uint64_t key, uint32_t servers) {
  return spec.kind == TableKind::kSparse ? SparseServer(key, servers) : DenseServer(spec, key, servers);
}

std::string Names(const std::vector<TableSpec>& specs) {
  std::string out;
  for (const TableSpec& s : specs) out += (out.empty() ? "" : ", ") + std::to_string(s.id) + " \"" + s.name + "\"";
  return out.empty() ? "none" : out;
}

// How many servers wrote the shards in `dir` (every file must say the same).
Result<uint32_t> WrittenBy(const std::string& dir) {
  static const std::regex kTables(R"(server-(\d+)-of-(\d+)\.tables)");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return Status::NotFound(dir + ": no server tables there (a checkpoint written by a sync.mode ps or hybrid job "
                                  "holds each server's shard there)");
  }
  uint32_t servers = 0;
  std::string first;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, m, kTables)) continue;
    const auto s = static_cast<uint32_t>(std::stoul(m[2].str()));
    if (servers != 0 && s != servers) {
      return Status::InvalidArgument(dir + ": shards of two cluster sizes (" + first + " and " + name + ")");
    }
    servers = s;
    first = name;
  }
  if (ec) return Status::IOError("cannot list " + dir + ": " + ec.message());
  if (servers == 0) return Status::NotFound(dir + ": no server-<r>-of-<S>.tables file (no server wrote its shard)");
  return servers;
}

}  // namespace

std::string ServerTablesDir(const std::string& checkpoint) { return checkpoint + "/ps"; }

Status WriteServerShard(const std::string& checkpoint, uint32_t rank, uint32_t servers,
                        const std::vector<TableShard>& tables) {
  std::error_code ec;
  fs::create_directories(ServerTablesDir(checkpoint), ec);
  if (ec) return Status::IOError("cannot create " + ServerTablesDir(checkpoint) + ": " + ec.message());
  std::vector<const TableSpec*> specs;
  for (const TableShard& t : tables) {
    const std::string path = RowsPath(checkpoint, rank, servers, t.spec->id);
    STRATA_ASSIGN_OR_RETURN(auto writer, RowFileWriter::Create(path, t.spec->RecordWidth()));
    STRATA_RETURN_IF_ERROR(t.store->Scan([&](uint64_t key, std::span<const float> record) {
      return writer->Add(key, record.data());
    }).WithContext("writing table \"" + t.spec->name + "\" to " + path));
    STRATA_RETURN_IF_ERROR(writer->Finish());
    specs.push_back(t.spec);
  }
  return WriteFileDurably(TablesPath(checkpoint, rank, servers), EncodeTableSpecs(specs));
}

Result<LoadedShards> ReadServerShards(const std::string& checkpoint, uint32_t rank, uint32_t servers) {
  const std::string dir = ServerTablesDir(checkpoint);
  LoadedShards out;
  STRATA_ASSIGN_OR_RETURN(out.written_by, WrittenBy(dir));
  // Every old shard's specs, which must agree.
  std::vector<TableSpec> specs;
  std::string specs_from;
  for (uint32_t r = 0; r < out.written_by; ++r) {
    const std::string path = TablesPath(checkpoint, r, out.written_by);
    auto bytes = ReadWholeFile(path);
    if (!bytes.ok() && bytes.status().IsNotFound()) {
      return Status::NotFound(path + ": missing (the checkpoint's " + std::to_string(out.written_by) +
                              " servers each wrote one; this one is incomplete)");
    }
    if (!bytes.ok()) return bytes.status();
    STRATA_ASSIGN_OR_RETURN(std::vector<TableSpec> these, DecodeTableSpecs(*bytes, path));
    std::sort(these.begin(), these.end(), [](const TableSpec& a, const TableSpec& b) { return a.id < b.id; });
    if (r == 0) {
      specs = std::move(these);
      specs_from = path;
    } else if (these != specs) {
      return Status::InvalidArgument(path + " holds tables " + Names(these) + ", which differ from " + specs_from +
                                     "'s: " + Names(specs) + " (shards of different jobs?)");
    }
  }
  for (const TableSpec& spec : specs) {
    LoadedTable t;
    t.spec = spec;
    const auto width = static_cast<size_t>(spec.RecordWidth());
    for (uint32_t r = 0; r < out.written_by; ++r) {
      const std::string path = RowsPath(checkpoint, r, out.written_by, spec.id);
      auto file = RowFileReader::Open(path, spec.RecordWidth());
      if (!file.ok() && file.status().IsNotFound()) {
        return Status::NotFound(path + ": missing (table \"" + spec.name + "\" of server " + std::to_string(r) + ")");
      }
      if (!file.ok()) return file.status().WithContext("table \"" + spec.name + "\"");
      for (uint64_t i = 0; i < file->count(); ++i) {
        const uint64_t key = file->key(i);
        if ((spec.kind == TableKind::kDense && key >= spec.NumChunks()) || Owner(spec, key, out.written_by) != r) {
          return Status::Corruption(path + ": key " + std::to_string(key) + " of table \"" + spec.name +
                                    "\" does not belong to server " + std::to_string(r) + " of " +
                                    std::to_string(out.written_by));
        }
        if (Owner(spec, key, servers) != rank) continue;
        t.keys.push_back(key);
        t.records.insert(t.records.end(), file->record(i), file->record(i) + width);
      }
    }
    out.rows += t.keys.size();
    out.tables.push_back(std::move(t));
  }
  return out;
}

}  // namespace strata
