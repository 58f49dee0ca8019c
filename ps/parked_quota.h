// parked_quota.h: ParkedQuota, how many requests (and payload bytes) one peer may have parked
// on a server at once: BSP/SSP pulls waiting for their clock hold their message until answered,
// so without a bound one peer sending pulls for a far clock grows the server's memory without
// end. Each legal trainer parks at most its pulls of a step or two; past the bound a pull is
// refused with ResourceExhausted naming the option, and other peers are not affected.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "common/status.h"

namespace strata {

// A value with no locking of its own: PsServer keeps it under the lock of its parked pulls.
class ParkedQuota {
 public:
  ParkedQuota(uint64_t max_requests, uint64_t max_bytes) : max_requests_(max_requests), max_bytes_(max_bytes) {}

  // Counts a request of `bytes` parked for `peer` (a connection's route), or refuses it,
  // leaving the counts as they were, when that peer would hold more than the bounds. `who`
  // names the peer in the error.
  Status Admit(const std::string& peer, uint64_t bytes, const std::string& who) {
    Held& h = held_[peer];
    if (h.requests + 1 > max_requests_) {
      return Refuse(peer, who + " already has " + std::to_string(h.requests) +
                              " pulls parked here, the most server.max_parked_per_peer (" +
                              std::to_string(max_requests_) + ") allows");
    }
    if (h.bytes + bytes > max_bytes_) {
      return Refuse(peer, who + " has " + std::to_string(h.bytes) + " bytes of pulls parked here; " +
                              std::to_string(bytes) + " more would pass server.max_parked_mb_per_peer (" +
                              std::to_string(max_bytes_ >> 20) + " MiB)");
    }
    ++h.requests;
    h.bytes += bytes;
    return Status::OK();
  }

  // A parked request of `peer` was answered (or dropped).
  void Release(const std::string& peer, uint64_t bytes) {
    auto it = held_.find(peer);
    if (it == held_.end()) return;
    it->second.requests -= it->second.requests > 0 ? 1 : 0;
    it->second.bytes -= std::min(it->second.bytes, bytes);
    if (it->second.requests == 0) held_.erase(it);
  }

  uint64_t refused() const { return refused_; }
  uint64_t held_requests(const std::string& peer) const {
    auto it = held_.find(peer);
    return it == held_.end() ? 0 : it->second.requests;
  }

 private:
  struct Held {
    uint64_t requests = 0;
    uint64_t bytes = 0;
  };
  Status Refuse(const std::string& peer, const std::string& why) {
    ++refused_;
    if (held_[peer].requests == 0) held_.erase(peer);
    return Status::ResourceExhausted(why);
  }

  const uint64_t max_requests_;
  const uint64_t max_bytes_;
  std::unordered_map<std::string, Held> held_;
  uint64_t refused_ = 0;
};

}  // namespace strata
