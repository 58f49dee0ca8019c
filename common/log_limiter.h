// log_limiter.h: LogLimiter, how a warning about something a peer can repeat at will (a refused
// connection, a malformed message) stays readable and cannot fill a disk. Events are counted per
// peer (a key: a host, a connection's route, a peer id): a peer's first event is logged, then at
// most one line per interval for that peer, each saying how many of its events it stands for; a
// flood from one peer does not hide another's first event. Two bounds hold whatever peers do:
// at most `max_lines` lines per interval over all peers (a peer whose turn falls past that
// budget keeps its count for its next line), and at most `max_peers` peers remembered (past that,
// the peer logged longest ago is forgotten, and a peer it sends again counts as new).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace strata {

// Thread-safe.
class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    Clock::duration every = std::chrono::seconds(10);
    size_t max_lines = 16;   // per interval, over all peers
    size_t max_peers = 1024;
  };
  struct Tick {
    bool log = false;    // write a line now
    uint64_t since = 0;  // this peer's events since its last line, this one included
    uint64_t total = 0;  // this peer's events while remembered
    uint64_t all = 0;    // events from every peer ever
    size_t peers = 0;    // peers remembered now
  };

  LogLimiter() : LogLimiter(Options{}) {}
  explicit LogLimiter(Options options) : options_(options) {}

  // Counts one event of `peer`.
  Tick Count(std::string_view peer, Clock::time_point now = Clock::now());

 private:
  struct Peer {
    uint64_t total = 0, since = 0;
    bool logged = false;  // a line was written for it
    Clock::time_point last{};
  };
  void ForgetOldest();

  const Options options_;
  std::mutex mu_;
  std::unordered_map<std::string, Peer> peers_;
  uint64_t all_ = 0;
  Clock::time_point window_start_{};
  size_t window_lines_ = 0;
};

}  // namespace strata
