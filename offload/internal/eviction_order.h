// eviction_order.h: the DRAM tier's bookkeeping for one shard: CachedRecord (a resident record)
// and EvictionOrder (LRU: one recency list; LFU: one recency list per access count), both
// intrusive so that touching a record allocates nothing. Not thread-safe: the shard's mutex
// guards them.
#pragma once

#include <cstdint>
#include <map>

namespace strata::offload_internal {

enum class EvictionPolicyKind { kLru, kLfu };

struct CachedRecord {
  uint64_t key = 0;
  float* data = nullptr;
  CachedRecord* prev = nullptr;  // links in the eviction order (only while `in_order`)
  CachedRecord* next = nullptr;
  uint64_t frequency = 0;        // LFU: accesses since the record entered DRAM
  uint64_t last_clock = 0;       // the clock of the last access (expiry)
  bool busy = false;             // owned by one call (loading, being visited or evicted)
  bool dirty = false;            // newer than its copy in RocksDB
  bool in_order = false;
};

// A doubly linked list of records, oldest at the head.
class RecordList {
 public:
  bool empty() const { return head_ == nullptr; }
  CachedRecord* head() const { return head_; }
  void PushBack(CachedRecord* r) {
    r->prev = tail_;
    r->next = nullptr;
    (tail_ ? tail_->next : head_) = r;
    tail_ = r;
  }
  void Unlink(CachedRecord* r) {
    (r->prev ? r->prev->next : head_) = r->next;
    (r->next ? r->next->prev : tail_) = r->prev;
    r->prev = r->next = nullptr;
  }

 private:
  CachedRecord* head_ = nullptr;
  CachedRecord* tail_ = nullptr;
};

// The order in which a shard evicts: LRU evicts the least recently used record; LFU the least
// frequently used one, the least recently used among equals. Busy records stay in the order
// (a hit is re-touched when its call ends) and are skipped by Scan.
class EvictionOrder {
 public:
  explicit EvictionOrder(EvictionPolicyKind kind) : kind_(kind) {}

  // A record that just entered DRAM, accessed `accesses` times by the call that brought it in.
  void Insert(CachedRecord* r, uint64_t accesses) {
    r->frequency = accesses;
    List(r->frequency).PushBack(r);
    r->in_order = true;
  }
  // `accesses` more accesses: the record becomes the most recent (of its new count, for LFU).
  void Touch(CachedRecord* r, uint64_t accesses) {
    Remove(r);
    Insert(r, r->frequency + accesses);
  }
  void Remove(CachedRecord* r) {
    if (!r->in_order) return;
    if (kind_ == EvictionPolicyKind::kLru) {
      lru_.Unlink(r);
    } else {
      auto it = lfu_.find(r->frequency);
      it->second.Unlink(r);
      if (it->second.empty()) lfu_.erase(it);
    }
    r->in_order = false;
  }
  // Calls f(record) on records in eviction order, first victim first, skipping busy ones, until
  // f returns false. f must not change the order.
  template <typename F>
  void Scan(F&& f) const {
    auto walk = [&](const RecordList& list) {
      for (CachedRecord* r = list.head(); r; r = r->next) {
        if (!r->busy && !f(r)) return false;
      }
      return true;
    };
    if (kind_ == EvictionPolicyKind::kLru) {
      walk(lru_);
      return;
    }
    for (const auto& [count, list] : lfu_) {
      if (!walk(list)) return;
    }
  }

 private:
  RecordList& List(uint64_t frequency) {
    return kind_ == EvictionPolicyKind::kLru ? lru_ : lfu_[frequency];
  }

  EvictionPolicyKind kind_;
  RecordList lru_;
  std::map<uint64_t, RecordList> lfu_;  // access count -> records with that count
};

}  // namespace strata::offload_internal
