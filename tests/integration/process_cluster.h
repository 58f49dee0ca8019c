// process_cluster.h: ProcessClusterTest, a LaunchFixture that starts a cluster's processes one
// by one (strata-scheduler, strata-server, strata-trainer), as compose or Slurm would, so a
// test can kill, restart, add or stop each of them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tests/integration/launch_fixture.h"
#include "tests/test_util.h"

namespace strata::testing {

class ProcessClusterTest : public LaunchFixture {
 protected:
  // Starts strata-scheduler at `bind` with the job's arguments; returns the address it listens on.
  std::string StartScheduler(const std::vector<std::string>& common, const std::string& bind);
  // Starts `binary` with the job's arguments, the scheduler's address and `rank` (none if < 0),
  // then `extra` arguments (e.g. --join).
  Subprocess& Start(const std::string& binary, const std::vector<std::string>& common, const std::string& address,
                    int rank, const std::vector<std::string>& extra = {});
  // Lines with a "loss" in `tag`'s metrics file of trainer `rank` so far: one per train.log_every steps.
  size_t MetricsLines(const std::string& tag, int rank = 0);

  std::vector<std::unique_ptr<Subprocess>> schedulers_;
  std::vector<std::unique_ptr<Subprocess>> nodes_;
};

}  // namespace strata::testing
