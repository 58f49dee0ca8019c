// read_ahead.h: ReadAhead, a server's background reader of the records the next requests will
// want (RowStore::Prefetch): when a trainer pulls one dense table (a layer's parameters), the
// server asks for the chunks it holds of the next table, which the trainer pulls next in
// forward order (tables are created in the model's parameter order). The read goes into DRAM
// room the store has left and evicts nothing, so it helps a cold store (a restarted server
// reloading from RocksDB) and a budget the table fits, and costs nothing where there is no room.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "offload/row_store.h"

namespace strata {

class ReadAhead {
 public:
  ReadAhead();
  ~ReadAhead();  // drops what is queued, waits for the read in progress
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // Queues a read-ahead of `keys` in `store`, which must outlive this ReadAhead. A store already
  // queued is not queued twice; beyond kMaxQueued the oldest is dropped (a read-ahead that
  // arrives late is worth nothing).
  void Ask(RowStore* store, std::vector<uint64_t> keys);

  uint64_t records_read() const { return records_read_.load(); }
  uint64_t errors() const { return errors_.load(); }

  static constexpr size_t kMaxQueued = 4;

 private:
  struct Job {
    RowStore* store;
    std::vector<uint64_t> keys;
  };
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  std::atomic<uint64_t> records_read_{0}, errors_{0};
  std::thread thread_;  // last: started once the rest is built
};

}  // namespace strata
