// server_table.h: PsServer::Table, one table as a server holds it (its store, dense pull
// snapshots, and the BSP accumulations not yet applied). Internal to ps/server*.cc.
#pragma once

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "ps/dense_snapshots.h"
#include "ps/optimizer.h"
#include "ps/server.h"

namespace strata {

struct PsServer::Table {
  // BSP: one clock's summed gradients of one key (sparse) or chunk (dense), and how many pushes
  // went into the sum. The sum runs in the order the pushes arrived: ((0 + g1) + g2) + ...
  struct Acc {
    std::vector<float> sum;
    uint32_t pushes = 0;
    float lr = -1.0f;  // the pushes' (all the same; negative: the table's)
  };

  TableSpec spec;
  std::unique_ptr<RowStore> store;
  RowStore::Init init;
  int slots = 0;
  // Dense tables: what pulls send (see dense_snapshots.h).
  std::unique_ptr<DenseSnapshots> snapshots;
  // The last clock given to store->AdvanceClock (guarded by clock_mu_).
  uint64_t store_clock = 0;
  // BSP: the accumulations of each clock not yet applied, and how many clocks have been
  // applied. Pushes take only bsp_mu (no server-wide lock on the hot path); AdvanceLocked takes
  // clock_mu_ then bsp_mu. applied_clock changes under both.
  std::mutex bsp_mu;
  std::map<int64_t, std::unordered_map<uint64_t, Acc>> pending;
  int64_t applied_clock = 0;
  // Elastic BSP (cluster.elastic, no pushers): each trainer's pushes of a clock it has not
  // clocked yet, by clock and sender node, kept apart from `pending` until its clock message
  // folds them in (FoldStagedLocked), so that a trainer declared dead first leaves nothing in a
  // clock's sum (DropStagedLocked); and the senders declared dead, whose pushes are refused.
  std::map<int64_t, std::map<uint32_t, std::unordered_map<uint64_t, Acc>>> staged;
  std::set<uint32_t> dead_pushers;
  // BSP with spec.pushers > 0 (dense): a chunk is applied as soon as its pushers have all pushed
  // it, so chunks run ahead of applied_clock: the next clock of such a chunk, the number of this
  // server's chunks applied early for each clock, and how many chunks this server holds (0:
  // not yet counted).
  std::unordered_map<uint64_t, int64_t> chunk_clock;
  std::map<int64_t, uint64_t> early_done;
  uint64_t my_chunks = 0;

  // Adds `acc` into `into` (an empty one becomes it): the sums, the pushes, and its lr.
  static void MergeAcc(Acc& into, Acc acc) {
    if (into.sum.empty()) {
      into.sum = std::move(acc.sum);
    } else {
      for (size_t j = 0; j < into.sum.size() && j < acc.sum.size(); ++j) into.sum[j] += acc.sum[j];
    }
    into.pushes += acc.pushes;
    into.lr = acc.lr;
  }

  uint32_t ValueFloats(uint64_t key) const {
    return spec.kind == TableKind::kSparse ? spec.dim : spec.ChunkLength(key);
  }
  // Runs `apply` over the records of `keys` (UpdateWithId when `id` is set), and brings the dense
  // snapshots along: a chunk whose snapshot pulls read gets its next one from this update (its
  // values copied into a fresh buffer inside the visit, while the store still holds the record,
  // and published with the version Invalidate returned there: DenseSnapshots), so the next pull
  // finds it fresh; the others are only invalidated. After an error every key is invalidated
  // and nothing published.
  Status UpdateRecords(std::span<const uint64_t> keys, const RowStore::Visit& apply, const UpdateId* id = nullptr) {
    if (!snapshots) return id ? store->UpdateWithId(keys, init, apply, *id) : store->Update(keys, init, apply);
    std::vector<std::shared_ptr<float>> fresh(keys.size());
    std::vector<uint64_t> versions(keys.size());
    std::vector<char> visited(keys.size(), 0);  // a copy is published only if it was made
    for (size_t i = 0; i < keys.size(); ++i) {
      if (snapshots->WasRead(keys[i])) fresh[i] = snapshots->Acquire();
    }
    auto visit = [&](size_t i, std::span<float> record) {
      apply(i, record);
      if (fresh[i]) std::memcpy(fresh[i].get(), record.data(), ValueFloats(keys[i]) * sizeof(float));
      versions[i] = snapshots->Invalidate(keys[i]);
      visited[i] = 1;
    };
    Status s = id ? store->UpdateWithId(keys, init, visit, *id) : store->Update(keys, init, visit);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!s.ok() || !visited[i]) {
        snapshots->Invalidate(keys[i]);
      } else if (fresh[i]) {
        snapshots->Publish(keys[i], versions[i], std::move(fresh[i]), /*read=*/false);
      }
    }
    return s;
  }
  // The clock a push of `key` must be for, at the earliest. Expects bsp_mu held.
  int64_t NextClockLocked(uint64_t key) const {
    if (chunk_clock.empty()) return applied_clock;
    auto it = chunk_clock.find(key);
    return it == chunk_clock.end() ? applied_clock : std::max(applied_clock, it->second);
  }
  // The lr of the accumulations of `key` at `clock` here, folded or staged; nullopt if none.
  std::optional<float> LrLocked(int64_t clock, uint64_t key) const {
    if (auto it = pending.find(clock); it != pending.end()) {
      if (auto a = it->second.find(key); a != it->second.end() && a->second.pushes > 0) return a->second.lr;
    }
    if (auto it = staged.find(clock); it != staged.end()) {
      for (const auto& [sender, accs] : it->second) {
        if (auto a = accs.find(key); a != accs.end() && a->second.pushes > 0) return a->second.lr;
      }
    }
    return std::nullopt;
  }
  // Elastic BSP: `sender` clocked `clock`: its staged pushes of it join the clock's sums, in the
  // order the clock messages arrive (one push of a key per trainer and clock: the same floats as
  // summing the pushes as they arrived).
  void FoldStagedLocked(int64_t clock, uint32_t sender) {
    auto it = staged.find(clock);
    if (it == staged.end()) return;
    auto from = it->second.find(sender);
    if (from == it->second.end()) return;
    auto& into = pending[clock];
    for (auto& [key, acc] : from->second) MergeAcc(into[key], std::move(acc));
    it->second.erase(from);
    if (it->second.empty()) staged.erase(it);
  }
  // Elastic BSP: `sender` was declared dead: its pushes of the clocks it did not clock are
  // dropped, and any it sends later refused. Returns the keys (or chunks) dropped.
  uint64_t DropStagedLocked(uint32_t sender) {
    dead_pushers.insert(sender);
    uint64_t dropped = 0;
    for (auto it = staged.begin(); it != staged.end();) {
      if (auto from = it->second.find(sender); from != it->second.end()) {
        dropped += from->second.size();
        it->second.erase(from);
      }
      it = it->second.empty() ? staged.erase(it) : std::next(it);
    }
    return dropped;
  }
  // Applies one accumulation to the store (and makes the chunk's pull snapshot stale).
  void ApplyAcc(uint64_t key, const Acc& acc, float scale, int64_t clock) {
    const Acc* of[1] = {&acc};
    ApplyKeys(std::span<const uint64_t>(&key, 1), of, scale, clock);
  }
  // Applies a clock's accumulations, every key in one store update (a tiered store writes them
  // in one WAL batch, synced once, not once a key).
  void ApplyAccs(const std::unordered_map<uint64_t, Acc>& accs, float scale, int64_t clock) {
    std::vector<uint64_t> keys;
    std::vector<const Acc*> of;
    keys.reserve(accs.size());
    of.reserve(accs.size());
    for (const auto& [key, acc] : accs) {
      keys.push_back(key);
      of.push_back(&acc);
    }
    ApplyKeys(keys, of, scale, clock);
  }
  // keys[j] takes *of[j], each with its lr (negative: the table's), times `scale`.
  void ApplyKeys(std::span<const uint64_t> keys, std::span<const Acc* const> of, float scale, int64_t clock) {
    Status s = UpdateRecords(keys, [&](size_t j, std::span<float> record) {
      OptimizerSpec o = spec.optimizer;
      if (of[j]->lr >= 0) o.lr = of[j]->lr;
      ApplyUpdate(o, slots, record, static_cast<int>(ValueFloats(keys[j])), of[j]->sum.data(), scale);
    });
    if (!s.ok()) spdlog::error("server: applying clock {} of table \"{}\": {}", clock, spec.name, s.ToString());
  }
  // pushers > 0: the factor a chunk's sum is applied with (before clipping).
  float MeanScale() const {
    return spec.aggregate == Aggregate::kMean ? 1.0f / static_cast<float>(spec.pushers) : 1.0f;
  }
  // pushers > 0: applies `key`'s accumulations that are complete, in clock order.
  void ApplyCompleteLocked(uint64_t key) {
    while (true) {
      const int64_t c = NextClockLocked(key);
      auto it = pending.find(c);
      if (it == pending.end()) return;
      auto a = it->second.find(key);
      if (a == it->second.end() || a->second.pushes < spec.pushers) return;
      ApplyAcc(key, a->second, MeanScale(), c);
      it->second.erase(a);
      if (it->second.empty()) pending.erase(it);
      chunk_clock[key] = c + 1;
      ++early_done[c];
    }
  }
  // pushers > 0: the clock every chunk of this server has been applied up to.
  int64_t ReadyClockLocked() const {
    int64_t c = applied_clock;
    for (auto it = early_done.find(c); it != early_done.end() && it->second >= my_chunks; it = early_done.find(++c)) {
    }
    return c;
  }
};

// A server that joined an elastic job, before it holds its keys: the clients retry.
inline Status TakingOver() {
  return Status::Unavailable("this server joined the job and is taking over its keys from the older servers");
}

// How many chunks of dense table `spec` live on server `me` of `servers` (DenseServer).
inline uint64_t ChunksOn(const TableSpec& spec, uint32_t me, uint32_t servers) {
  const uint64_t n = spec.NumChunks();
  const uint64_t first = (me + servers - spec.PlacementOffset() % servers) % servers;
  return first < n ? (n - 1 - first) / servers + 1 : 0;
}

}  // namespace strata
