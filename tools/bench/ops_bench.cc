// ops_bench.cc: placeholder until the ops benchmark lands (its owner replaces this file).
#include "tools/bench/bench.h"

namespace strata::bench {

BenchFn SetupOpsBench(CLI::App&) {
  return [] { return Result<Report>(Status::Unimplemented("strata-bench ops is not written yet")); };
}

}  // namespace strata::bench
