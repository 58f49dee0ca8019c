// bsp_moves.cc: BspMoves and its wire form.
#include "ps/bsp_moves.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <utility>

namespace strata {

size_t BspMoves::entries() const {
  size_t n = 0;
  for (const BspTableState& t : tables) n += t.entries.size();
  return n;
}

void BspMoves::Absorb(const BspMoves& earlier) {
  for (const BspTableState& e : earlier.tables) {
    auto it = std::find_if(tables.begin(), tables.end(), [&](const BspTableState& t) { return t.table == e.table; });
    if (it == tables.end()) {
      tables.push_back(e);
      continue;
    }
    it->applied_clock = std::min(it->applied_clock, e.applied_clock);
    it->entries.insert(it->entries.end(), e.entries.begin(), e.entries.end());
    SortEntries(&*it);
  }
  // The union of both records, clock by clock (ClockMembers::Merge's rule).
  ClockMembers merged;
  for (const std::vector<ClockMembers::Record>* list : {&earlier.clocks, &std::as_const(clocks)}) {
    for (const ClockMembers::Record& r : *list) (void)merged.Merge(r);
  }
  clocks = merged.Records();
  for (uint32_t r : earlier.dead_ranks) {
    if (std::find(dead_ranks.begin(), dead_ranks.end(), r) == dead_ranks.end()) dead_ranks.push_back(r);
  }
  std::sort(dead_ranks.begin(), dead_ranks.end());
}

void SortEntries(BspTableState* state) {
  std::sort(state->entries.begin(), state->entries.end(), [](const BspEntry& a, const BspEntry& b) {
    return std::tie(a.clock, a.staged_by, a.key) < std::tie(b.clock, b.staged_by, b.key);
  });
}

void WriteBspMoves(const BspMoves& moves, wire::MigrateRows::Builder body, Message* msg) {
  auto out = body.initBsp(static_cast<unsigned>(moves.tables.size()));
  for (unsigned i = 0; i < moves.tables.size(); ++i) {
    const BspTableState& t = moves.tables[i];
    const auto n = static_cast<unsigned>(t.entries.size());
    auto state = out[i];
    state.setTable(t.table);
    state.setAppliedClock(t.applied_clock);
    auto clocks = state.initClocks(n);
    auto keys = state.initKeys(n);
    auto pushes = state.initPushes(n);
    auto lrs = state.initLrs(n);
    const bool staged = std::any_of(t.entries.begin(), t.entries.end(), [](const BspEntry& e) { return e.staged_by; });
    auto by = state.initStagedBy(staged ? n : 0);
    std::vector<float> sums;
    for (unsigned j = 0; j < n; ++j) {
      const BspEntry& e = t.entries[j];
      clocks.set(j, e.clock);
      keys.set(j, e.key);
      pushes.set(j, e.pushes);
      lrs.set(j, e.lr);
      if (staged) by.set(j, e.staged_by);
      sums.insert(sums.end(), e.sum.begin(), e.sum.end());
    }
    const auto floats = static_cast<int64_t>(sums.size());
    msg->AddPayload(DType::kF32, {floats}, Buffer::Take(std::move(sums)));
    auto chunk_keys = state.initChunkKeys(static_cast<unsigned>(t.chunk_next.size()));
    auto chunk_next = state.initChunkNext(static_cast<unsigned>(t.chunk_next.size()));
    for (unsigned j = 0; j < t.chunk_next.size(); ++j) {
      chunk_keys.set(j, t.chunk_next[j].first);
      chunk_next.set(j, t.chunk_next[j].second);
    }
  }
  auto records = body.initClockMembers(static_cast<unsigned>(moves.clocks.size()));
  for (unsigned i = 0; i < moves.clocks.size(); ++i) {
    const ClockMembers::Record& r = moves.clocks[i];
    records[i].setClock(r.clock);
    auto members = records[i].initMembers(static_cast<unsigned>(r.members.size()));
    for (unsigned j = 0; j < r.members.size(); ++j) members.set(j, r.members[j]);
    auto clocked = records[i].initClocked(static_cast<unsigned>(r.clocked.size()));
    for (unsigned j = 0; j < r.clocked.size(); ++j) clocked.set(j, r.clocked[j]);
  }
  auto dead = body.initDeadRanks(static_cast<unsigned>(moves.dead_ranks.size()));
  for (unsigned i = 0; i < moves.dead_ranks.size(); ++i) dead.set(i, moves.dead_ranks[i]);
  auto scales = body.initGradScales(static_cast<unsigned>(moves.grad_scales.size()));
  for (unsigned i = 0; i < moves.grad_scales.size(); ++i) {
    scales[i].setClock(moves.grad_scales[i].first);
    scales[i].setScale(moves.grad_scales[i].second);
  }
}

Result<BspMoves> ReadBspMoves(const Message& msg, wire::MigrateRows::Reader body, size_t first,
                              const BspValueFloats& floats) {
  const auto states = body.getBsp();
  if (first + states.size() != msg.num_payloads()) {
    return Status::InvalidArgument("migrateRows.bsp: " + std::to_string(states.size()) + " tables, but " +
                                   std::to_string(msg.num_payloads() - std::min(first, msg.num_payloads())) +
                                   " payloads of sums after the rows");
  }
  BspMoves out;
  for (unsigned i = 0; i < states.size(); ++i) {
    const auto state = states[i];
    const std::string where = "migrateRows.bsp[" + std::to_string(i) + "] (table " + std::to_string(state.getTable()) + ")";
    const size_t n = state.getClocks().size();
    const size_t by = state.getStagedBy().size();
    if (state.getKeys().size() != n || state.getPushes().size() != n || state.getLrs().size() != n ||
        (by != 0 && by != n)) {
      return Status::InvalidArgument(where + ": clocks, keys, pushes, lrs and stagedBy differ in length");
    }
    BspTableState t{state.getTable(), state.getAppliedClock(), {}, {}};
    size_t total = 0;
    std::vector<uint32_t> sizes(n);
    for (unsigned j = 0; j < n; ++j) {
      if (state.getClocks()[j] < t.applied_clock) {
        return Status::InvalidArgument(where + ": an accumulation of clock " + std::to_string(state.getClocks()[j]) +
                                       ", which is applied already (appliedClock " + std::to_string(t.applied_clock) +
                                       ")");
      }
      Result<uint32_t> size = floats(t.table, state.getKeys()[j]);
      if (!size.ok()) return size.status().WithContext(where);
      sizes[j] = *size;
      total += sizes[j];
    }
    const PayloadInfo p = msg.payload_info(first + i);
    if (p.dtype != DType::kF32 || p.shape.size() != 1 || static_cast<size_t>(p.shape[0]) != total) {
      return Status::InvalidArgument(where + ": its sums are not " + std::to_string(total) + " f32");
    }
    // Copied out: a received frame need not be aligned for floats.
    const std::byte* sums = p.buffer->data();
    for (unsigned j = 0; j < n; ++j) {
      BspEntry e;
      e.clock = state.getClocks()[j];
      e.key = state.getKeys()[j];
      e.staged_by = by ? state.getStagedBy()[j] : 0;
      e.pushes = state.getPushes()[j];
      e.lr = state.getLrs()[j];
      e.sum.resize(sizes[j]);
      if (sizes[j]) std::memcpy(e.sum.data(), sums, sizes[j] * sizeof(float));
      sums += sizes[j] * sizeof(float);
      t.entries.push_back(std::move(e));
    }
    const auto chunk_keys = state.getChunkKeys();
    const auto chunk_next = state.getChunkNext();
    if (chunk_keys.size() != chunk_next.size()) {
      return Status::InvalidArgument(where + ": chunkKeys and chunkNext differ in length");
    }
    for (unsigned j = 0; j < chunk_keys.size(); ++j) {
      if (chunk_next[j] <= t.applied_clock) {
        return Status::InvalidArgument(where + ": chunk " + std::to_string(chunk_keys[j]) + " applies clock " +
                                       std::to_string(chunk_next[j]) + " next, not ahead of appliedClock " +
                                       std::to_string(t.applied_clock) + " (chunkNext)");
      }
      Result<uint32_t> size = floats(t.table, chunk_keys[j]);
      if (!size.ok()) return size.status().WithContext(where + ", chunkKeys");
      t.chunk_next.emplace_back(chunk_keys[j], chunk_next[j]);
    }
    out.tables.push_back(std::move(t));
  }
  for (auto r : body.getClockMembers()) {
    ClockMembers::Record rec;
    rec.clock = r.getClock();
    for (uint32_t m : r.getMembers()) rec.members.push_back(m);
    for (uint32_t c : r.getClocked()) rec.clocked.push_back(c);
    out.clocks.push_back(std::move(rec));
  }
  for (uint32_t d : body.getDeadRanks()) out.dead_ranks.push_back(d);
  for (auto g : body.getGradScales()) {
    if (!std::isfinite(g.getScale()) || g.getScale() < 0) {
      return Status::InvalidArgument("migrateRows.gradScales: clock " + std::to_string(g.getClock()) + " has scale " +
                                     std::to_string(g.getScale()) + ", not a finite number >= 0");
    }
    out.grad_scales.emplace_back(g.getClock(), g.getScale());
  }
  return out;
}

}  // namespace strata
