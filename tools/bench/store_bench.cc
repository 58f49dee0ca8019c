// store_bench.cc: placeholder until the store benchmark lands (its owner replaces this file).
#include "tools/bench/bench.h"

namespace strata::bench {

BenchFn SetupStoreBench(CLI::App&) {
  return [] { return Result<Report>(Status::Unimplemented("strata-bench store is not written yet")); };
}

}  // namespace strata::bench
