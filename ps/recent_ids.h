// recent_ids.h: RecentIds, the push ids a server applied lately, per sender, so that a push
// retried after its reply was lost is answered without being applied twice. Held in memory; a
// restarted server refills it from the ids its durable stores recorded with the updates
// (RowStore::RecordedUpdateIds), so with durability wal a retry is applied once across a kill -9.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace strata {

// Thread-safe. Keeps each sender's last `per_sender` ids (a retry follows its original within
// the client's timeout, far fewer pushes than that later).
class RecentIds {
 public:
  explicit RecentIds(size_t per_sender = 1 << 16) : per_sender_(per_sender) {}

  bool Seen(uint32_t sender, uint64_t id) const {
    std::lock_guard lock(mu_);
    auto it = senders_.find(sender);
    return it != senders_.end() && it->second.ids.contains(id);
  }
  void Remember(uint32_t sender, uint64_t id) {
    std::lock_guard lock(mu_);
    Sender& s = senders_[sender];
    if (!s.ids.insert(id).second) return;
    s.order.push_back(id);
    if (s.order.size() > per_sender_) {
      s.ids.erase(s.order.front());
      s.order.pop_front();
    }
  }

  // Forgets every id (a state transfer replaces them with its copy's).
  void Clear() {
    std::lock_guard lock(mu_);
    senders_.clear();
  }

  // Every (sender, id) held, oldest first per sender: what a server hands over with rows that
  // move to another server (ps/server_migrate.cc), so retries reaching it are known there too.
  std::vector<std::pair<uint32_t, uint64_t>> Snapshot() const {
    std::lock_guard lock(mu_);
    std::vector<std::pair<uint32_t, uint64_t>> out;
    for (const auto& [sender, s] : senders_) {
      for (uint64_t id : s.order) out.emplace_back(sender, id);
    }
    return out;
  }

 private:
  struct Sender {
    std::unordered_set<uint64_t> ids;
    std::deque<uint64_t> order;  // oldest first
  };
  const size_t per_sender_;
  mutable std::mutex mu_;
  std::unordered_map<uint32_t, Sender> senders_;
};

}  // namespace strata
