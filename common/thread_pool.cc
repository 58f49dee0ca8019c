// thread_pool.cc: ThreadPool's workers and its chunked job.
#include "common/thread_pool.h"

#include <algorithm>
#include <atomic>

namespace strata {

struct ThreadPool::Job {
  const std::function<void(int64_t, int64_t)>* fn;
  int64_t n, grain, chunks;
  std::atomic<int64_t> next{0};
  int64_t done = 0;  // under mu_
  int active = 0;    // workers inside Drain, under mu_
};

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { Work(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n <= grain) {
    fn(0, n);
    return;
  }
  if (workers_.empty()) {
    // Same chunks, in order, on this thread.
    for (int64_t begin = 0; begin < n; begin += grain) fn(begin, std::min(n, begin + grain));
    return;
  }
  Run(n, grain, fn);
}

void ThreadPool::Run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  std::lock_guard run_lock(run_mu_);
  Job job{&fn, n, grain, (n + grain - 1) / grain};
  {
    std::lock_guard lock(mu_);
    job_ = &job;
    ++generation_;
  }
  wake_.notify_all();
  const int64_t mine = Drain(job);
  std::unique_lock lock(mu_);
  job.done += mine;
  // The job lives on this stack: wait until every worker that picked it up has let go.
  finished_.wait(lock, [&] { return job.done == job.chunks && job.active == 0; });
  job_ = nullptr;
}

// Runs chunks until none is left; returns how many this thread ran.
int64_t ThreadPool::Drain(Job& job) {
  int64_t ran = 0;
  for (int64_t c; (c = job.next.fetch_add(1)) < job.chunks;) {
    const int64_t begin = c * job.grain;
    (*job.fn)(begin, std::min(job.n, begin + job.grain));
    ++ran;
  }
  return ran;
}

void ThreadPool::Work() {
  uint64_t seen = 0;
  std::unique_lock lock(mu_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || (job_ != nullptr && generation_ != seen); });
    if (stop_) return;
    seen = generation_;
    Job* job = job_;
    ++job->active;
    lock.unlock();
    const int64_t ran = Drain(*job);
    lock.lock();
    job->done += ran;
    --job->active;
    finished_.notify_all();
  }
}

}  // namespace strata
