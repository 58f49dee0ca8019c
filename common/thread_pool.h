// thread_pool.h: ThreadPool, a small pool that runs one loop at a time over fixed-size chunks
// (the trainer's CPU ops and the optimizer kernels use it; its owner decides how many threads).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

// Workers sleep on a condition variable between jobs (no spinning, unlike an OpenMP runtime's
// default), so they leave the cores to other pools (OpenBLAS's) when idle. Work is cut into
// chunks of a fixed size, so a reduction that sums per-chunk partials in chunk order gives the
// same bits with any number of threads. Thread-safe: callers on several threads queue, one job
// runs at a time. Not reentrant: a job must not call ParallelFor on the same pool.
class ThreadPool {
 public:
  // `threads` counts the calling thread: ThreadPool(1) starts no worker and runs inline.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, n) in chunks of `grain` (the last may be short), on the
  // workers and the calling thread; returns when every chunk is done. Runs inline when
  // n <= grain or the pool has one thread. fn must be safe to call concurrently on disjoint
  // ranges.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  struct Job;
  static int64_t Drain(Job& job);
  void Work();
  void Run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  std::mutex run_mu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable wake_, finished_;
  std::vector<std::thread> workers_;
  Job* job_ = nullptr;       // under mu_
  uint64_t generation_ = 0;  // under mu_
  bool stop_ = false;        // under mu_
};

}  // namespace strata
