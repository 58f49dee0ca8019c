// wakeup.h: Wakeup, an eventfd that other threads signal to wake a thread blocked in poll().
// Signal() is one write(2) from any thread, with no lock held and no ZeroMQ socket touched, so
// a caller can signal after releasing its own lock (a ZeroMQ inproc socket cannot be shared by
// threads, so it had to be signalled under one); signals coalesce until Clear().
#pragma once

namespace strata {

class Wakeup {
 public:
  Wakeup();  // STRATA_CHECKs that the eventfd was created (only fd exhaustion fails it)
  ~Wakeup();
  Wakeup(const Wakeup&) = delete;
  Wakeup& operator=(const Wakeup&) = delete;

  // Makes fd() readable until the next Clear(). Thread-safe, never blocks.
  void Signal();
  // Consumes every signal so far. Call on the waiting thread before it looks for work, so that
  // a signal for work queued after the look is not lost.
  void Clear();
  // For poll(2) or zmq_poll's raw-fd items: POLLIN while signalled.
  int fd() const { return fd_; }

 private:
  int fd_;
};

}  // namespace strata
