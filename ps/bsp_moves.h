// bsp_moves.h: the BSP accumulations that travel with rows from one server to another, as plain
// values and on the wire (MigrateRows.bsp, .clockMembers, .deadRanks). A replica's copy of a
// whole shard carries every BSP table's state (ps/server_transfer.cc); an elastic join or leave
// carries the accumulations of the moving keys only, taken out of the sender's tables when it
// switches its layout, so that the clock they belong to applies them on the receiver instead
// (ps/server_bsp_moves.cc), and a join also carries the sender's record of the clocks it has not
// applied (ps/clock_members.h).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "common/message.h"
#include "common/status.h"
#include "ps/clock_members.h"

namespace strata {

// One accumulation: the summed pushes of `key` (dense: chunk) for `clock`.
struct BspEntry {
  int64_t clock = 0;
  uint64_t key = 0;
  uint32_t staged_by = 0;  // 0: part of the clock's sums; n > 0: node n - 1's push, not folded in yet
  uint32_t pushes = 0;
  float lr = -1.0f;  // negative: the table's
  std::vector<float> sum;
  bool operator==(const BspEntry&) const = default;
};

// One BSP table's part: the clocks its sender had applied, and the entries (every one of a later
// clock).
struct BspTableState {
  uint32_t table = 0;
  int64_t applied_clock = 0;
  std::vector<BspEntry> entries;
  // Pushers > 0: the chunks applied ahead of applied_clock, each with the clock it applies next.
  std::vector<std::pair<uint64_t, int64_t>> chunk_next;
  bool operator==(const BspTableState&) const = default;
};

struct BspMoves {
  std::vector<BspTableState> tables;
  std::vector<ClockMembers::Record> clocks;  // a join: the sender's clocks not applied
  std::vector<uint32_t> dead_ranks;          // and the trainer ranks it counts as dead
  std::vector<std::pair<int64_t, float>> grad_scales;  // a copy: clipping factors of clocks not applied

  size_t entries() const;
  // A plan made again for the same receiver (a joining server's first ask, again after a lost
  // reply) keeps what the first one took out of the tables: `earlier`'s entries join these, each
  // table's applied clock is the lower one (the earlier rows lack the clocks since), and the
  // clocks' records are merged.
  void Absorb(const BspMoves& earlier);
};

// Sorts each table's entries by clock, then sums before staged pushes, then key: two copies of
// the same state are the same bytes.
void SortEntries(BspTableState* state);

// Writes `moves` into `body` (bsp, clockMembers, deadRanks) and each table's sums as one f32
// payload appended to `msg`, in table order: call it after the rows' and push ids' payloads.
void WriteBspMoves(const BspMoves& moves, wire::MigrateRows::Builder body, Message* msg);

// How many floats an entry of `key` in table `table` holds; an error if that table is no BSP
// table of the receiver, or the key not its to take.
using BspValueFloats = std::function<Result<uint32_t>(uint32_t table, uint64_t key)>;

// Reads what WriteBspMoves wrote: `body` from `msg`, whose payloads from `first` are the sums.
// Everything is checked first (list lengths, an entry of a clock applied already, the sums'
// sizes, a staged entry's node); InvalidArgument naming the field, or `floats`'s error.
Result<BspMoves> ReadBspMoves(const Message& msg, wire::MigrateRows::Reader body, size_t first,
                              const BspValueFloats& floats);

}  // namespace strata
