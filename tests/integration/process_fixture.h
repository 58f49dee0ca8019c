// process_fixture.h: ProcessFixture, a LaunchFixture that starts each process of a cluster
// itself (strata-scheduler with an address file, then strata-server / strata-trainer --rank r),
// so that a test can kill -9 one and restart it or leave it dead, and read each one's log.
#pragma once

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/integration/launch_fixture.h"
#include "tests/test_util.h"

namespace strata::testing {

class ProcessFixture : public LaunchFixture {
 protected:
  // Starts strata-scheduler at `bind` with the `common` flags; returns the address it listens on.
  std::string StartScheduler(const std::vector<std::string>& common, const std::string& bind) {
    const std::string file = dir_.File("scheduler-" + std::to_string(schedulers_.size()) + ".address");
    std::vector<std::string> argv = {BinPath("strata-scheduler"), "--bind", bind, "--address-file", file};
    argv.insert(argv.end(), common.begin(), common.end());
    schedulers_.push_back(std::make_unique<Subprocess>(
        argv, dir_.File("scheduler-" + std::to_string(schedulers_.size()) + ".log")));
    std::string address;
    EXPECT_TRUE(WaitFor([&] {
      std::ifstream in(file);
      return static_cast<bool>(in >> address);
    }, Millis(20000))) << schedulers_.back()->Log();
    return address;
  }
  // Starts `binary` (strata-server, strata-trainer) with the `common` flags as rank `rank` of the
  // cluster whose scheduler is at `address`; its log is <binary>-<rank>[-<n>].log.
  Subprocess& Start(const std::string& binary, const std::vector<std::string>& common,
                    const std::string& address, int rank) {
    std::vector<std::string> argv = {BinPath(binary)};
    argv.insert(argv.end(), common.begin(), common.end());
    argv.insert(argv.end(), {"--set", "cluster.scheduler=" + address, "--rank", std::to_string(rank)});
    std::string log = binary + "-" + std::to_string(rank);
    for (int n = 1; std::ifstream(dir_.File(log + ".log")).good(); ++n) {
      log = binary + "-" + std::to_string(rank) + "-" + std::to_string(n);
    }
    nodes_.push_back(std::make_unique<Subprocess>(argv, dir_.File(log + ".log")));
    return *nodes_.back();
  }
  // Lines with a loss in rank `rank`'s metrics file of Metrics(tag) so far: one per
  // train.log_every steps.
  size_t MetricsLines(const std::string& tag = "run", int rank = 0) {
    std::ifstream in(Rank(tag, rank));
    size_t n = 0;
    for (std::string line; std::getline(in, line);) n += line.find("\"loss\"") != std::string::npos;
    return n;
  }

  std::vector<std::unique_ptr<Subprocess>> schedulers_;
  std::vector<std::unique_ptr<Subprocess>> nodes_;
};

}  // namespace strata::testing
