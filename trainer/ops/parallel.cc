// parallel.cc: the ops' pool behind ParallelFor (a ThreadPool sized once, on first use).
#include "trainer/ops/parallel.h"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace strata::ops {

ThreadPool& OpsThreadPool() {
  static ThreadPool pool(ParallelThreads());
  return pool;
}

int ParallelThreads() {
  if (const char* env = std::getenv("OPENBLAS_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n >= 1) return std::min(n, 256);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

void SetBlasThreads(int n) { openblas_set_num_threads(std::max(1, n)); }

void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (n <= std::max<int64_t>(1, grain)) {
    fn(0, n);  // no pool for small loops: it is made on first use
    return;
  }
  OpsThreadPool().ParallelFor(n, grain, fn);
}

}  // namespace strata::ops
