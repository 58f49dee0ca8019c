// parallel.h: ParallelFor, the CPU ops' thread pool for elementwise loops and reductions
// outside GEMM (optimizer updates, activations, bias and norm sums): one ThreadPool
// (common/thread_pool.h) whose sleeping workers leave the cores to OpenBLAS's own threads when
// GEMM runs. Work is cut into chunks of a fixed size, so a reduction that sums per-chunk
// partials in chunk order gives the same bits with any number of threads.
#pragma once

#include <cstdint>
#include <functional>

#include "common/thread_pool.h"

namespace strata::ops {

// Calls fn(begin, end) over [0, n) in chunks of `grain` (the last may be short), on the pool
// and the calling thread; returns when every chunk is done. Runs inline when n <= grain or the
// pool has one thread. fn must be safe to call concurrently on disjoint ranges. Not reentrant:
// fn must not call ParallelFor.
void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// The pool ParallelFor runs on (made on first use, ParallelThreads() threads), for kernels that
// take a pool (common/optim).
ThreadPool& OpsThreadPool();

// Threads ParallelFor uses: OPENBLAS_NUM_THREADS if set (the launcher sets it to each trainer's
// share of the cores), else the number of cores.
int ParallelThreads();

// Sets OpenBLAS's threads for the GEMMs that follow (it read OPENBLAS_NUM_THREADS when it was
// loaded, before main). A main() that picks the process's threads calls this and sets
// OPENBLAS_NUM_THREADS before any op runs, so the pool (made on first use) agrees.
void SetBlasThreads(int n);

// Elementwise loops below this many elements run inline: waking the pool costs more.
constexpr int64_t kParallelGrain = 1 << 16;

}  // namespace strata::ops
