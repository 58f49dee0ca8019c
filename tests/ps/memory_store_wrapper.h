// memory_store_wrapper.h: MemoryStoreWrapper, a RowStore that passes every call to a
// MemoryRowStore of its own, for unit tests whose store changes one call (an update that fails
// as a full disk would, clocks recorded) and keeps the rest real.
#pragma once

#include <cstdint>
#include <span>

#include "offload/memory_row_store.h"

namespace strata::testing {

class MemoryStoreWrapper : public RowStore {
 public:
  explicit MemoryStoreWrapper(int width) : inner_(width) {}
  int width() const override { return inner_.width(); }
  Status Update(std::span<const uint64_t> keys, const Init& init, const Visit& visit) override {
    return inner_.Update(keys, init, visit);
  }
  Status Read(std::span<const uint64_t> keys, const Init& init, const ReadVisit& visit) override {
    return inner_.Read(keys, init, visit);
  }
  Status Peek(std::span<const uint64_t> keys, const Init& init, const ReadVisit& visit) override {
    return inner_.Peek(keys, init, visit);
  }
  Status Scan(const ScanVisit& visit) override { return inner_.Scan(visit); }
  Result<uint64_t> Erase(std::span<const uint64_t> keys) override { return inner_.Erase(keys); }
  RowStoreStats stats() const override { return inner_.stats(); }

 protected:
  MemoryRowStore inner_;
};

}  // namespace strata::testing
