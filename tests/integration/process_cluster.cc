// process_cluster.cc: ProcessClusterTest.
#include "tests/integration/process_cluster.h"

#include <fstream>

namespace strata::testing {

std::string ProcessClusterTest::StartScheduler(const std::vector<std::string>& common, const std::string& bind) {
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

Subprocess& ProcessClusterTest::Start(const std::string& binary, const std::vector<std::string>& common,
                                      const std::string& address, int rank, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {BinPath(binary)};
  argv.insert(argv.end(), common.begin(), common.end());
  argv.insert(argv.end(), {"--set", "cluster.scheduler=" + address});
  if (rank >= 0) argv.insert(argv.end(), {"--rank", std::to_string(rank)});
  argv.insert(argv.end(), extra.begin(), extra.end());
  const std::string name = binary + "-" + (rank >= 0 ? std::to_string(rank) : "joined") + "-" + std::to_string(nodes_.size());
  nodes_.push_back(std::make_unique<Subprocess>(argv, dir_.File(name + ".log")));
  return *nodes_.back();
}

size_t ProcessClusterTest::MetricsLines(const std::string& tag, int rank) {
  std::ifstream in(Rank(tag, rank));
  size_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.find("\"loss\"") != std::string::npos;
  return n;
}

}  // namespace strata::testing
