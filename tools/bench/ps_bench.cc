// ps_bench.cc: placeholder until the ps benchmark lands (its owner replaces this file).
#include "tools/bench/bench.h"

namespace strata::bench {

BenchFn SetupPsBench(CLI::App&) {
  return [] { return Result<Report>(Status::Unimplemented("strata-bench ps is not written yet")); };
}

}  // namespace strata::bench
