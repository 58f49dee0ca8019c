// equivalence.h: EquivalenceTest, the fixture of the tests that hold a parallel split to what
// one process computes: the reference run's losses and final checkpoint, and the comparison of
// a launched split with them (losses at every step within 1e-5 relative; every tensor of the
// gathered checkpoint, parameters and optimizer state, within float tolerance).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tests/integration/launch_fixture.h"

namespace strata::testing {

class EquivalenceTest : public LaunchFixture {
 protected:
  // Every process has one BLAS thread (Subprocess): OpenBLAS blocks a GEMM differently with
  // more threads, and the reference must do the same float operations as each split.

  // Runs the job alone (sync.mode local) for `steps` steps: its losses and its checkpoint at
  // the last step are the reference.
  void RunReference(const std::string& job, int steps = 20);
  // Launches the job on `trainers` (0 servers) with `sets`, checks its losses against the
  // reference's, and takes its final weights as the reference for the weights. Data parallelism splits a batch into
  // means of fewer samples, which rounds differently, and AdamW magnifies that on rarely seen
  // rows: a split that includes dp is held against dp alone for the weights.
  void UseWeightsOf(const std::string& job, const std::string& tag, int trainers,
                    std::vector<std::string> sets);
  // Launches the job on `trainers` with the plan in `sets` and compares it with the reference;
  // the checkpoint must hold `shard_files` files (one per (pp, tp) shard).
  void ExpectMatchesReference(const std::string& job, const std::string& tag, int trainers,
                              int shard_files, std::vector<std::string> sets);

  int steps_ = 20;
  // How close each element of the gathered weights must be: abs + rel * |w|. A split that only
  // reorders work (pp, dp's gathered batches) computes the same floats; one that splits sums
  // (tp's row-parallel products) rounds differently, and AdamW, which divides each update by the
  // gradient's running RMS, turns a rounding difference in a near-zero gradient into one of up
  // to lr in the weight: those tests loosen these.
  float weight_abs_tol_ = 1e-5f;
  float weight_rel_tol_ = 1e-4f;
  std::vector<double> base_;
  std::map<std::string, std::vector<float>> base_weights_;
};

}  // namespace strata::testing
