// serial_queue.h: SerialQueue, one thread that runs posted tasks in the order they were posted
// (a communicator's sends leave the compute thread through one).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace strata {

// The thread starts with the first Post, not before, so an owner that never posts costs no
// thread. Thread-safe. The destructor runs the tasks still queued, then joins.
class SerialQueue {
 public:
  SerialQueue() = default;
  ~SerialQueue();
  SerialQueue(const SerialQueue&) = delete;
  SerialQueue& operator=(const SerialQueue&) = delete;

  void Post(std::function<void()> task);

 private:
  void Work();

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;  // under mu_
  bool stop_ = false;                        // under mu_
  std::thread worker_;                       // started by the first Post, under mu_
};

}  // namespace strata
