// dense_placement_test.cc: where dense chunks live. PlaceDense spreads a model's bytes over the
// servers (the id-based offset put every weight of a weight/bias model on one server), a
// table's chunks and ChunksOn agree, and the placement travels on the wire with old specs
// (no field) reading as the id-based layout.
#include <gtest/gtest.h>

#include <capnp/message.h>

#include <algorithm>
#include <vector>

#include "ps/server_table.h"
#include "ps/table.h"

namespace strata {
namespace {

TableSpec Dense(uint32_t id, uint64_t numel) {
  TableSpec t;
  t.id = id;
  t.name = "t" + std::to_string(id);
  t.kind = TableKind::kDense;
  t.numel = numel;
  t.chunk_floats = 100;
  return t;
}

// The floats each of `servers` servers holds of `specs`.
std::vector<uint64_t> Loads(const std::vector<TableSpec>& specs, uint32_t servers) {
  std::vector<uint64_t> loads(servers);
  for (const TableSpec& s : specs) {
    for (uint64_t c = 0; c < s.NumChunks(); ++c) loads[DenseServer(s, c, servers)] += s.ChunkLength(c);
  }
  return loads;
}

// A transformer's parameters: a one-chunk weight, then its small bias, eight times.
std::vector<TableSpec> WeightsAndBiases() {
  std::vector<TableSpec> specs;
  for (uint32_t i = 0; i < 16; ++i) specs.push_back(Dense(i, i % 2 == 0 ? 100 : 4));
  return specs;
}

TEST(DensePlacement, ByIdPutsEveryWeightOnOneServerPlaceDenseSpreadsThem) {
  std::vector<TableSpec> specs = WeightsAndBiases();
  const std::vector<uint64_t> by_id = Loads(specs, 2);
  EXPECT_EQ(by_id[0], 800u);  // why PlaceDense exists: ids alternate parity
  EXPECT_EQ(by_id[1], 32u);
  std::vector<uint64_t> loads(2);
  for (TableSpec& s : specs) PlaceDense(&s, &loads);
  EXPECT_EQ(Loads(specs, 2), loads);  // what it counted is where DenseServer puts them
  EXPECT_EQ(loads[0] + loads[1], 832u);
  EXPECT_LE(std::max(loads[0], loads[1]) - std::min(loads[0], loads[1]), 100u);  // at most one tensor apart
  EXPECT_EQ(loads[0], 416u);
}

TEST(DensePlacement, ManyServersAndTablesOfSeveralChunksStayWithinOneChunk) {
  for (uint32_t servers : {1u, 2u, 3u, 5u, 8u}) {
    std::vector<TableSpec> specs;
    std::vector<uint64_t> loads(servers);
    for (uint32_t i = 0; i < 40; ++i) {
      specs.push_back(Dense(i, 1 + (uint64_t{i} * 7919) % 730));  // 1 to 8 chunks, short last ones
      PlaceDense(&specs.back(), &loads);
    }
    EXPECT_EQ(Loads(specs, servers), loads) << servers;
    const auto [lo, hi] = std::minmax_element(loads.begin(), loads.end());
    EXPECT_LE(*hi - *lo, 100u) << servers << " servers";  // one chunk
    for (const TableSpec& s : specs) {
      uint64_t counted = 0;
      for (uint32_t me = 0; me < servers; ++me) {
        uint64_t mine = 0;
        for (uint64_t c = 0; c < s.NumChunks(); ++c) mine += DenseServer(s, c, servers) == me ? 1 : 0;
        EXPECT_EQ(ChunksOn(s, me, servers), mine) << s.name << " on " << me << " of " << servers;
        counted += mine;
      }
      EXPECT_EQ(counted, s.NumChunks());
    }
  }
}

TEST(DensePlacement, SparseTablesAndNoServersAreLeftAlone) {
  TableSpec sparse;
  sparse.kind = TableKind::kSparse;
  sparse.dim = 8;
  std::vector<uint64_t> loads(2);
  PlaceDense(&sparse, &loads);
  EXPECT_EQ(sparse.placement, TableSpec::kPlaceById);
  EXPECT_EQ(loads, (std::vector<uint64_t>{0, 0}));
  TableSpec dense = Dense(3, 500);
  std::vector<uint64_t> none;
  PlaceDense(&dense, &none);
  EXPECT_EQ(dense.placement, TableSpec::kPlaceById);
}

TEST(DensePlacement, TravelsOnTheWireAndAnOldSpecReadsAsById) {
  TableSpec placed = Dense(6, 300);
  placed.placement = 1;
  capnp::MallocMessageBuilder m;
  ToWire(placed, m.initRoot<wire::TableSpec>());
  EXPECT_EQ(FromWire(m.getRoot<wire::TableSpec>().asReader()), placed);
  // A spec written before the field existed: the default is the id-based layout.
  capnp::MallocMessageBuilder old;
  auto w = old.initRoot<wire::TableSpec>();
  w.setId(6);
  w.setNumel(300);
  const TableSpec back = FromWire(w.asReader());
  EXPECT_EQ(back.placement, TableSpec::kPlaceById);
  EXPECT_EQ(back.PlacementOffset(), 6u);
  EXPECT_EQ(DenseServer(back, 0, 4), 2u);
}

}  // namespace
}  // namespace strata
