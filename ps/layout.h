// layout.h: PsLayout, which server holds a key or a dense chunk while servers join an elastic
// job (cluster.elastic), and the marker of the error a server answers a key it no longer holds.
//
// The job's first `base` servers (cluster.servers) split the sparse keys as SparseServer does;
// each server that joins later, rank n, takes from every earlier server an equal share of its
// keys (a key moves to n when a hash of (key, n) falls in the last 1/(n+1) of its range, as in
// jump consistent hashing), so growing from n to n + 1 servers moves only the keys that go to the
// new one, 1/(n+1) of them. Dense chunks stay on the first servers (DenseServer over `base`):
// only sparse keys rebalance.
#pragma once

#include <cstdint>
#include <string_view>

#include "ps/table.h"

namespace strata {

// Ends the FailedPrecondition a server answers a sparse key that another server holds under
// its layout; PsClient then refreshes its layout and sends those keys where they live now.
inline constexpr std::string_view kLayoutMoved = "the key moved under a newer server layout";

// Which server of `servers` holds sparse key `key`, the first `base` of them from the start.
uint32_t ElasticSparseServer(uint64_t key, uint32_t base, uint32_t servers);

// A plain value.
struct PsLayout {
  uint32_t base = 1;     // the job's first servers: they hold every dense chunk
  uint32_t servers = 1;  // sparse keys spread over this many (>= base)

  uint32_t SparseOwner(uint64_t key) const { return ElasticSparseServer(key, base, servers); }
  uint32_t DenseOwner(uint32_t table, uint64_t chunk) const { return DenseServer(table, chunk, base); }
  uint32_t Owner(const TableSpec& spec, uint64_t key) const {
    return spec.kind == TableKind::kSparse ? SparseOwner(key) : DenseOwner(spec.id, key);
  }
};

}  // namespace strata
