// read_ahead.cc: ReadAhead (read_ahead.h).
#include "ps/read_ahead.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace strata {

ReadAhead::ReadAhead() : thread_([this] { Run(); }) {}

ReadAhead::~ReadAhead() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  thread_.join();
}

void ReadAhead::Ask(RowStore* store, std::vector<uint64_t> keys) {
  if (keys.empty()) return;
  {
    std::lock_guard lock(mu_);
    if (std::any_of(queue_.begin(), queue_.end(), [&](const Job& j) { return j.store == store; })) return;
    if (queue_.size() >= kMaxQueued) queue_.pop_front();
    queue_.push_back({store, std::move(keys)});
  }
  cv_.notify_one();
}

void ReadAhead::Run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    Result<uint64_t> read = job.store->Prefetch(job.keys);
    if (read.ok()) {
      records_read_ += *read;
    } else if (errors_++ == 0) {  // the pull that follows reports it, if it persists
      spdlog::warn("server: read-ahead: {}", read.status().ToString());
    }
  }
}

}  // namespace strata
