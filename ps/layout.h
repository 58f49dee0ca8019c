// layout.h: PsLayout, which server holds a key or a dense chunk while servers join and leave an
// elastic job (cluster.elastic), and the marker of the error a server answers a key it no longer
// holds.
//
// The job's first `base` servers (cluster.servers) split the sparse keys as SparseServer does;
// each server that joins later, rank n, takes from every earlier server an equal share of its
// keys (a key moves to n when a hash of (key, n) falls in the last 1/(n+1) of its range, as in
// jump consistent hashing), so growing from n to n + 1 servers moves only the keys that go to the
// new one, 1/(n+1) of them. A server that left (`left`) is skipped: a joined one's keys go back to
// whoever held them before it joined; a first server's keys go to the first servers still there,
// the one of highest hash of (key, server) (rendezvous hashing), so a leave moves only the keys
// of the server leaving. Server 0 never leaves, so a key always has an owner. Dense chunks stay
// on the first servers (DenseServer over `base`): only sparse keys rebalance.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "ps/table.h"

namespace strata {

// Ends the FailedPrecondition a server answers a sparse key that another server holds under
// its layout; PsClient then refreshes its layout and sends those keys where they live now.
inline constexpr std::string_view kLayoutMoved = "the key moved under a newer server layout";
// Whether a server refused a request with kLayoutMoved.
inline bool LayoutMoved(const Status& s) {
  return s.code() == StatusCode::kFailedPrecondition && s.message().find(kLayoutMoved) != std::string_view::npos;
}

// Which server of `servers` holds sparse key `key`, the first `base` of them from the start,
// none of `left` (sorted; never 0).
uint32_t ElasticSparseServer(uint64_t key, uint32_t base, uint32_t servers, const std::vector<uint32_t>& left = {});

// A plain value.
struct PsLayout {
  uint32_t base = 1;              // the job's first servers: they hold every dense chunk
  uint32_t servers = 1;           // sparse keys spread over this many ranks (>= base)...
  std::vector<uint32_t> left;     // ...but these, which left the job (sorted, never 0)

  bool Left(uint32_t rank) const { return std::binary_search(left.begin(), left.end(), rank); }
  // Marks `rank` as gone (kept sorted; once).
  void Leave(uint32_t rank) {
    if (!Left(rank)) left.insert(std::upper_bound(left.begin(), left.end(), rank), rank);
  }
  uint32_t SparseOwner(uint64_t key) const { return ElasticSparseServer(key, base, servers, left); }
  uint32_t DenseOwner(const TableSpec& spec, uint64_t chunk) const { return DenseServer(spec, chunk, base); }
  uint32_t Owner(const TableSpec& spec, uint64_t key) const {
    return spec.kind == TableKind::kSparse ? SparseOwner(key) : DenseOwner(spec, key);
  }
  bool operator==(const PsLayout&) const = default;
};

}  // namespace strata
