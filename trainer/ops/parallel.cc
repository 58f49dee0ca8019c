// parallel.cc: the pool behind ParallelFor.
#include "trainer/ops/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace strata::ops {
namespace {

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { Work(); });
  }
  ~Pool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void Run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    std::lock_guard run_lock(run_mu_);  // one job at a time (callers on several threads queue)
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

 private:
  struct Job {
    const std::function<void(int64_t, int64_t)>* fn;
    int64_t n, grain, chunks;
    std::atomic<int64_t> next{0};
    int64_t done = 0;    // under mu_
    int active = 0;      // workers inside Drain, under mu_
  };

  // Runs chunks until none is left; returns how many this thread ran.
  static int64_t Drain(Job& job) {
    int64_t ran = 0;
    for (int64_t c; (c = job.next.fetch_add(1)) < job.chunks;) {
      const int64_t begin = c * job.grain;
      (*job.fn)(begin, std::min(job.n, begin + job.grain));
      ++ran;
    }
    return ran;
  }

  void Work() {
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

  std::mutex run_mu_;
  std::mutex mu_;
  std::condition_variable wake_, finished_;
  std::vector<std::thread> workers_;
  Job* job_ = nullptr;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

Pool& GetPool() {
  static Pool pool(ParallelThreads());
  return pool;
}

}  // namespace

int ParallelThreads() {
  if (const char* env = std::getenv("OPENBLAS_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n >= 1) return std::min(n, 256);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n <= grain) {
    fn(0, n);
    return;
  }
  Pool& pool = GetPool();
  if (pool.threads() == 1) {
    // Same chunks, in order, on this thread.
    for (int64_t begin = 0; begin < n; begin += grain) fn(begin, std::min(n, begin + grain));
    return;
  }
  pool.Run(n, grain, fn);
}

}  // namespace strata::ops
