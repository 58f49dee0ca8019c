// trace.h: Trace, a timeline of what a trainer's threads did (forward, backward, each
// all-reduce bucket, pushes and pulls, the optimizer), written as Chrome-trace JSON
// (chrome://tracing or https://ui.perfetto.dev) so overlap can be seen, not just claimed.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace strata {

// Seconds from `since` to now on the steady clock (the communication threads' accounting).
inline double SecondsSince(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Thread-safe. A disabled trace records nothing and costs a branch.
class Trace {
 public:
  struct Event {
    std::string name;
    std::string category;  // "compute", "comm", "ps", "optim"
    int tid = 0;           // 0: the training thread, 1: the communication thread
    double start_us = 0;   // since the trace began
    double dur_us = 0;
    int64_t step = -1;
  };

  explicit Trace(bool enabled) : enabled_(enabled), origin_(std::chrono::steady_clock::now()) {}

  bool enabled() const { return enabled_; }
  double NowUs() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_).count();
  }
  void Add(Event e);
  std::vector<Event> Events() const;

  // {"traceEvents": [...]} with one "X" event per record, pid = rank.
  Status Write(const std::string& path, int rank) const;

  // Records [construction, destruction) as one event.
  class Scope {
   public:
    Scope(Trace* trace, std::string name, std::string category, int tid, int64_t step)
        : trace_(trace && trace->enabled() ? trace : nullptr),
          event_{std::move(name), std::move(category), tid, trace_ ? trace_->NowUs() : 0, 0, step} {}
    ~Scope() {
      if (trace_) {
        event_.dur_us = trace_->NowUs() - event_.start_us;
        trace_->Add(std::move(event_));
      }
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Trace* trace_;
    Event event_;
  };

 private:
  const bool enabled_;
  const std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
};

}  // namespace strata
