// log_limiter.h: LogLimiter, how a warning about something a peer can repeat at will (a refused
// connection, a malformed message) stays readable and cannot fill a disk: the first event is
// logged, then at most one line per interval, each saying how many events it stands for.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

namespace strata {

// Thread-safe.
class LogLimiter {
 public:
  struct Tick {
    bool log = false;    // write a line now
    uint64_t since = 0;  // events since the last line, this one included
    uint64_t total = 0;  // events ever
  };

  explicit LogLimiter(std::chrono::steady_clock::duration every = std::chrono::seconds(10)) : every_(every) {}

  // Counts one event.
  Tick Count() {
    std::lock_guard lock(mu_);
    ++total_;
    ++since_;
    const auto now = std::chrono::steady_clock::now();
    if (total_ > 1 && now - last_ < every_) return {false, since_, total_};
    Tick t{true, since_, total_};
    since_ = 0;
    last_ = now;
    return t;
  }

 private:
  const std::chrono::steady_clock::duration every_;
  std::mutex mu_;
  uint64_t total_ = 0, since_ = 0;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace strata
