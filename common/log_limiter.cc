// log_limiter.cc: LogLimiter.
#include "common/log_limiter.h"

namespace strata {

LogLimiter::Tick LogLimiter::Count(std::string_view peer, Clock::time_point now) {
  std::lock_guard lock(mu_);
  ++all_;
  auto it = peers_.find(std::string(peer));
  if (it == peers_.end()) {
    if (peers_.size() >= options_.max_peers) ForgetOldest();
    it = peers_.emplace(std::string(peer), Peer{}).first;
  }
  Peer& p = it->second;
  ++p.total;
  ++p.since;
  Tick tick{false, p.since, p.total, all_, peers_.size()};
  if (p.logged && now - p.last < options_.every) return tick;
  if (window_lines_ == 0 || now - window_start_ >= options_.every) {
    window_start_ = now;
    window_lines_ = 0;
  }
  if (window_lines_ >= options_.max_lines) return tick;  // counted, told in the peer's next line
  ++window_lines_;
  tick.log = true;
  p.since = 0;
  p.logged = true;
  p.last = now;
  return tick;
}

void LogLimiter::ForgetOldest() {
  // Only when more peers than max_peers misbehave: a scan is cheaper than an index kept always.
  // A peer never logged (its turn fell past the line budget) has the oldest `last` of all.
  auto oldest = peers_.begin();
  for (auto it = peers_.begin(); it != peers_.end(); ++it) {
    if (it->second.last < oldest->second.last) oldest = it;
  }
  if (oldest != peers_.end()) peers_.erase(oldest);
}

}  // namespace strata
