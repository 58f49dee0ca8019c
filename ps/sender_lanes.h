// sender_lanes.h: SenderLanes, which worker runs each of a sender's requests, so that one
// trainer's requests on different keys (the chunks of one dense push) are applied on several
// workers at once while its order still holds where it matters:
//   a keyed request (a push or pull of one key of one table) runs after every earlier request of
//   its sender with the same key (they share a worker, whose queue is FIFO) and after every
//   earlier unkeyed one;
//   an unkeyed request (a clock, a push of many keys, createTable...) runs once every earlier
//   request of its sender has finished, and before any later one starts.
// So a trainer's clock still follows its pushes, and a retried push (same push id, same key)
// never races its first try. Pure bookkeeping, no threads: the caller enqueues what Admit and
// Done hand back on the workers they name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace strata {

// A request's key: its table and its one key (a dense chunk, or a sparse row).
struct LaneKey {
  uint32_t table = 0;
  uint64_t key = 0;
};

// Thread-safe. T: what is queued (a Request).
template <typename T>
class SenderLanes {
 public:
  // What to enqueue now, and on which worker.
  using Ready = std::vector<std::pair<size_t, T>>;

  explicit SenderLanes(size_t workers) : workers_(workers ? workers : 1) {}

  // A request from `sender` arrived (in the order its sender sent it).
  Ready Admit(uint32_t sender, std::optional<LaneKey> key, T item) {
    std::lock_guard lock(mu_);
    Sender& s = senders_[sender];
    s.waiting.push_back({key, std::move(item)});
    return ReleaseLocked(sender, s);
  }

  // A worker finished one of `sender`'s requests (the one Admit or Done handed it).
  Ready Done(uint32_t sender, bool keyed) {
    std::lock_guard lock(mu_);
    auto it = senders_.find(sender);
    if (it == senders_.end()) return {};
    Sender& s = it->second;
    --s.running;
    if (!keyed) s.unkeyed_running = false;
    Ready ready = ReleaseLocked(sender, s);
    if (s.running == 0 && s.waiting.empty()) senders_.erase(it);
    return ready;
  }

  // Whether `sender` has no request running or waiting: every request it sent before has
  // finished. A request its sender's delivery thread handles itself while this holds (a pull
  // answered on the receive thread) runs after all of them, as the lanes would order it, and
  // before any later one (that thread admits nothing else meanwhile).
  bool Idle(uint32_t sender) const {
    std::lock_guard lock(mu_);
    return !senders_.contains(sender);
  }

  // The worker of a keyed request: the same for every request on that key.
  size_t WorkerOf(const LaneKey& k) const {
    uint64_t h = (uint64_t{k.table} << 40) ^ k.key;
    h *= 0x9e3779b97f4a7c15ull;
    return static_cast<size_t>((h >> 32) % workers_);
  }
  size_t HomeOf(uint32_t sender) const { return sender % workers_; }

  // Senders with requests running or waiting (for tests and statistics).
  size_t senders() const {
    std::lock_guard lock(mu_);
    return senders_.size();
  }

 private:
  struct Waiting {
    std::optional<LaneKey> key;
    T item;
  };
  struct Sender {
    std::deque<Waiting> waiting;  // not yet handed to a worker, in arrival order
    size_t running = 0;           // handed to a worker, not done
    bool unkeyed_running = false;
  };

  Ready ReleaseLocked(uint32_t sender, Sender& s) {
    Ready ready;
    while (!s.waiting.empty() && !s.unkeyed_running) {
      Waiting& w = s.waiting.front();
      if (w.key) {
        ready.emplace_back(WorkerOf(*w.key), std::move(w.item));
      } else {
        if (s.running > 0) break;  // waits for everything before it
        s.unkeyed_running = true;
        ready.emplace_back(HomeOf(sender), std::move(w.item));
      }
      ++s.running;
      s.waiting.pop_front();
    }
    return ready;
  }

  const size_t workers_;
  mutable std::mutex mu_;
  std::unordered_map<uint32_t, Sender> senders_;
};

}  // namespace strata
