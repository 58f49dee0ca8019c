// store_bench.cc: `strata-bench store`: rows/s and per-batch p99 of TieredRowStore pulls (Read)
// and pushes (Update) on a hot working set that fits in DRAM and on a working set 10x the DRAM
// budget, beside raw RocksDB (MultiGet; MultiGet + WriteBatch) on the same data in the same run.
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <thread>

// EncodeKey: the raw-RocksDB baseline writes the store's own keys (check_layers.sh allows it).
#include "offload/internal/store_format.h"
#include "offload/tiered_row_store.h"
#include "tools/bench/bench.h"

namespace strata::bench {
namespace {

struct Options {
  int width = 96;            // floats per record: 32 of value + Adam's m and v
  uint64_t keys = 400000;    // rows in the table
  int budget_ratio = 10;     // table bytes / DRAM budget
  uint64_t hot_keys = 0;     // hot working set; 0: half of what the budget holds
  int batch = 1024;          // keys per call
  int batches = 100;         // timed calls per measurement and repetition
  int reps = 3;
  std::string dir;           // "" = a fresh directory under $TMPDIR or /tmp
  std::string policy = "lru";
};

// What one side measured for one (working set, op): per-call latencies and rows/s per rep.
struct Figures {
  std::vector<double> call_us;
  std::vector<double> rows_per_s;
};

// Raw RocksDB, configured like the store's tier, with the store's DRAM budget added to its
// block cache so both sides have the same memory.
class RawDb {
 public:
  static Result<std::unique_ptr<RawDb>> Open(const std::string& path, uint64_t cache_bytes, int width) {
    rocksdb::Options o;
    o.create_if_missing = true;
    o.max_background_jobs = 2;
    o.compression = rocksdb::kNoCompression;
    rocksdb::BlockBasedTableOptions t;
    t.block_cache = rocksdb::NewLRUCache(cache_bytes);
    t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
    o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
    rocksdb::DB* db = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(o, path, &db);
    if (!s.ok()) return Status::IOError("raw RocksDB at " + path + ": " + s.ToString());
    auto r = std::make_unique<RawDb>();
    r->db_.reset(db);
    r->width_ = width;
    return r;
  }
  Status Write(rocksdb::WriteBatch& b) {
    rocksdb::WriteOptions wo;
    wo.disableWAL = true;  // as the store in durability none
    rocksdb::Status s = db_->Write(wo, &b);
    return s.ok() ? Status::OK() : Status::IOError(s.ToString());
  }
  // MultiGet of `keys` into `out`; with `update`, adds to every value and writes them back.
  Status Call(const std::vector<uint64_t>& keys, std::vector<float>& out, bool update) {
    const size_t n = keys.size();
    key_bytes_.resize(8 * n);
    slices_.resize(n);
    values_.resize(n);
    statuses_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      offload_internal::EncodeKey(keys[i], &key_bytes_[8 * i]);
      slices_[i] = rocksdb::Slice(&key_bytes_[8 * i], 8);
      values_[i].Reset();
    }
    db_->MultiGet(rocksdb::ReadOptions(), db_->DefaultColumnFamily(), n, slices_.data(), values_.data(),
                  statuses_.data());
    const size_t bytes = sizeof(float) * width_;
    for (size_t i = 0; i < n; ++i) {
      if (!statuses_[i].ok() || values_[i].size() != bytes) return Status::Internal("raw: bad MultiGet");
      std::memcpy(&out[i * width_], values_[i].data(), bytes);
    }
    if (!update) return Status::OK();
    rocksdb::WriteBatch b;
    for (size_t i = 0; i < n; ++i) {
      out[i * width_] += 1e-3f;
      b.Put(slices_[i], rocksdb::Slice(reinterpret_cast<const char*>(&out[i * width_]), bytes));
    }
    return Write(b);
  }

 private:
  std::unique_ptr<rocksdb::DB> db_;
  int width_ = 0;
  std::vector<char> key_bytes_;
  std::vector<rocksdb::Slice> slices_;
  std::vector<rocksdb::PinnableSlice> values_;
  std::vector<rocksdb::Status> statuses_;
};

void InitRow(uint64_t key, std::span<float> r) {
  for (size_t j = 0; j < r.size(); ++j) r[j] = j < 32 ? 1e-3f * static_cast<float>((key + j) % 1000) : 0.0f;
}

Result<Report> RunStoreBench(const Options& o) {
  if (o.width < 1 || o.keys < 1000 || o.batch < 1 || o.batches < 1 || o.reps < 1 || o.budget_ratio < 1) {
    return Status::InvalidArgument("--width, --batch, --batches, --reps, --budget-ratio >= 1, --keys >= 1000");
  }
  if (o.policy != "lru" && o.policy != "lfu") return Status::InvalidArgument("--policy: lru or lfu");
  std::string root = o.dir;
  bool remove_root = false;
  if (root.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/strata-store-bench-XXXXXX";
    if (!mkdtemp(templ.data())) return Status::IOError("mkdtemp " + templ);
    root = templ;
    remove_root = true;
  }
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } cleanup{remove_root ? root : ""};

  const uint64_t footprint = 4ull * o.width + TieredRowStore::kRecordOverheadBytes;
  TieredStoreOptions so;
  so.path = root + "/tiered";
  so.dram_budget_bytes = o.keys * footprint / o.budget_ratio;
  so.policy = o.policy == "lru" ? EvictionPolicy::kLru : EvictionPolicy::kLfu;
  so.rocksdb_block_cache_bytes = 8ull << 20;
  const uint64_t hot_keys = o.hot_keys ? o.hot_keys : so.dram_budget_bytes / footprint / 2;
  STRATA_ASSIGN_OR_RETURN(auto store, TieredRowStore::Open(so, o.width));
  STRATA_ASSIGN_OR_RETURN(auto raw, RawDb::Open(root + "/raw", so.rocksdb_block_cache_bytes + so.dram_budget_bytes, o.width));

  // Load the same table into both, in random order (the store evicts as it goes).
  std::cerr << "store: loading " << o.keys << " rows of " << o.width << " floats into both\n";
  std::vector<uint64_t> order(o.keys);
  for (uint64_t k = 0; k < o.keys; ++k) order[k] = k * 2654435761ull % (1ull << 40);  // spread ids
  std::mt19937_64 rng(7);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<float> row(o.width);
  for (size_t at = 0; at < order.size(); at += o.batch) {
    const size_t n = std::min<size_t>(o.batch, order.size() - at);
    std::span<const uint64_t> keys(&order[at], n);
    STRATA_RETURN_IF_ERROR(store->Update(keys, InitRow, [](size_t, std::span<float>) {}));
    rocksdb::WriteBatch b;
    char key[8];
    for (uint64_t k : keys) {
      InitRow(k, row);
      offload_internal::EncodeKey(k, key);
      b.Put(rocksdb::Slice(key, 8), rocksdb::Slice(reinterpret_cast<const char*>(row.data()), 4 * o.width));
    }
    STRATA_RETURN_IF_ERROR(raw->Write(b));
  }

  struct Case {
    std::string set;
    bool update;
  };
  const std::vector<Case> cases = {{"hot", false}, {"hot", true}, {"10x budget", false}, {"10x budget", true}};
  Table table("strata-bench store: rows/s and per-call p99, tiered store vs raw RocksDB (same data, same run)",
              {{"working set", "working_set"},
               {"op", "op"},
               {"keys", "keys", Table::Format::kInteger},
               {"hit rate", "hit_rate", Table::Format::kFixed3},
               {"our krows/s", "our_krows_per_s", Table::Format::kFixed1},
               {"our p99 us", "our_p99_us", Table::Format::kFixed1},
               {"raw krows/s", "raw_krows_per_s", Table::Format::kFixed1},
               {"raw p99 us", "raw_p99_us", Table::Format::kFixed1},
               {"ours/raw", "ratio", Table::Format::kFixed2}});
  nlohmann::json details = nlohmann::json::array();
  std::vector<float> out(static_cast<size_t>(o.batch) * o.width);
  for (const Case& c : cases) {
    const uint64_t set = c.set == "hot" ? hot_keys : o.keys;
    std::cerr << "store: " << c.set << " " << (c.update ? "push" : "pull") << ": " << o.reps << " x "
              << o.batches << " calls of " << o.batch << " keys over " << set << " rows\n";
    Figures ours, theirs;
    uint64_t hits = 0, lookups = 0;
    std::vector<uint64_t> keys(o.batch);
    for (int rep = -1; rep < o.reps; ++rep) {  // rep -1 warms (the hot set moves into DRAM)
      const int calls = rep < 0 ? std::max(o.batches, static_cast<int>(2 * set / o.batch + 1)) : o.batches;
      const auto before = store->detailed_stats();
      Stopwatch total;
      for (int i = 0; i < calls; ++i) {
        for (auto& k : keys) k = order[rng() % set];
        Stopwatch w;
        Status s = c.update ? store->Update(keys, InitRow,
                                            [&](size_t, std::span<float> r) { r[0] += 1e-3f; })
                            : store->Read(keys, InitRow, [&](size_t i, std::span<const float> r) {
                                std::memcpy(&out[i * o.width], r.data(), 4 * o.width);
                              });
        STRATA_RETURN_IF_ERROR(s);
        if (rep >= 0) ours.call_us.push_back(w.Micros());
      }
      if (rep >= 0) {
        ours.rows_per_s.push_back(static_cast<double>(calls) * o.batch / total.Seconds());
        const auto after = store->detailed_stats();
        hits += after.hits - before.hits;
        lookups += (after.hits - before.hits) + (after.misses - before.misses);
      }
      total.Restart();
      for (int i = 0; i < calls; ++i) {
        for (auto& k : keys) k = order[rng() % set];
        Stopwatch w;
        STRATA_RETURN_IF_ERROR(raw->Call(keys, out, c.update));
        if (rep >= 0) theirs.call_us.push_back(w.Micros());
      }
      if (rep >= 0) theirs.rows_per_s.push_back(static_cast<double>(calls) * o.batch / total.Seconds());
    }
    const double hit_rate = lookups ? static_cast<double>(hits) / lookups : 0;
    const double our = Median(ours.rows_per_s), their = Median(theirs.rows_per_s);
    table.AddRow({c.set, c.update ? "push (Update)" : "pull (Read)", set, hit_rate, our / 1e3,
                  Percentile(ours.call_us, 99), their / 1e3, Percentile(theirs.call_us, 99), our / their});
    details.push_back({{"working_set", c.set},
                       {"op", c.update ? "push" : "pull"},
                       {"ours_rows_per_s_reps", ours.rows_per_s},
                       {"raw_rows_per_s_reps", theirs.rows_per_s},
                       {"ours_p50_us", Percentile(ours.call_us, 50)},
                       {"raw_p50_us", Percentile(theirs.call_us, 50)}});
  }

  const auto st = store->detailed_stats();
  Report report;
  report.benchmark = "store";
  report.tables.push_back(std::move(table));
  report.details = {{"runs", details},
                    {"store_stats",
                     {{"evictions", st.evictions}, {"written_back", st.written_back},
                      {"multigets", st.multigets}, {"write_batches", st.write_batches}}}};
  report.config = {{"width", o.width},
                   {"keys", o.keys},
                   {"hot_keys", hot_keys},
                   {"batch", o.batch},
                   {"batches", o.batches},
                   {"reps", o.reps},
                   {"policy", o.policy},
                   {"dram_budget_bytes", so.dram_budget_bytes},
                   {"record_footprint_bytes", footprint},
                   {"store_block_cache_bytes", so.rocksdb_block_cache_bytes},
                   {"raw_block_cache_bytes", so.rocksdb_block_cache_bytes + so.dram_budget_bytes},
                   {"dir", root},
                   {"cpus", std::thread::hardware_concurrency()}};
  report.notes = {
      "table: " + std::to_string(o.keys) + " rows of " + std::to_string(o.width) + " floats; DRAM budget " +
          FormatBytes(so.dram_budget_bytes) + " = table footprint / " + std::to_string(o.budget_ratio) +
          "; hot set " + std::to_string(hot_keys) + " rows (fits the budget). Keys uniform within the set.",
      "ours: TieredRowStore (durability none, " + o.policy + ") Read copying each row out / Update adding "
          "to one float. raw: RocksDB MultiGet copying each row out / MultiGet + WriteBatch (WAL off, as "
          "ours), with a block cache of the store's cache + its DRAM budget (same memory).",
      "rows/s: median of " + std::to_string(o.reps) + " repetitions of " + std::to_string(o.batches) +
          " calls; p99 over all timed calls (microseconds per call of " + std::to_string(o.batch) +
          " keys). hit rate: lookups served from DRAM. One thread.",
      "goals: hot >= 10x raw, 10x-budget >= 0.7x raw (ours/raw column)."};
  return report;
}

}  // namespace

BenchFn SetupStoreBench(CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--width", o->width, "floats per record (value + optimizer state)")->capture_default_str();
  app.add_option("--keys", o->keys, "rows in the table")->capture_default_str();
  app.add_option("--budget-ratio", o->budget_ratio, "table footprint / DRAM budget")->capture_default_str();
  app.add_option("--hot-keys", o->hot_keys, "hot working set (0: half the budget)")->capture_default_str();
  app.add_option("--batch", o->batch, "keys per call")->capture_default_str();
  app.add_option("--batches", o->batches, "timed calls per measurement and repetition")->capture_default_str();
  app.add_option("--reps", o->reps, "repetitions (median reported)")->capture_default_str();
  app.add_option("--policy", o->policy, "lru or lfu")->capture_default_str();
  app.add_option("--dir", o->dir, "directory for both databases (default: a temp dir, removed)");
  return [o] { return RunStoreBench(*o); };
}

}  // namespace strata::bench
