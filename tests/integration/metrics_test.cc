// metrics_test.cc: cluster.metrics_port end to end: during a launch (ctr, hybrid, 2 servers, 2
// trainers) the scheduler, every server and every trainer answer GET /metrics with every name
// docs/metrics.md marks `live` for their role, the servers count real traffic, and the latency
// histograms have every bucket, cumulative, and count what happened. A server's /healthz (the
// Kubernetes readiness probe) answers 503 while it registers and 200 once it serves.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "cluster/node.h"
#include "common/metrics.h"
#include "tests/integration/launch_fixture.h"

namespace strata::testing {
namespace {

// The documented names marked live, by process ("all" expanded to every role).
std::map<std::string, std::set<std::string>> LiveNames() {
  std::map<std::string, std::set<std::string>> names;
  std::istringstream doc(ReadFile(std::string(STRATA_SOURCE_DIR) + "/docs/metrics.md"));
  const std::regex row(R"(^\| `(strata_[a-z_]+)` \| [a-z]+ \| ([a-z]+) \| ([a-z]+) \|)");
  for (std::string line; std::getline(doc, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, row) || m[3] != "live") continue;
    for (const char* role : {"scheduler", "server", "trainer"}) {
      if (m[2] == "all" || m[2] == role) names[role].insert(m[1]);
    }
  }
  return names;
}

// The value of the first series of `name` in an exposition text; -1 when absent.
double Value(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) == 0 && (line[name.size()] == ' ' || line[name.size()] == '{')) {
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return -1;
}

// A base port whose `count` consecutive ports are free now, below the kernel's ephemeral range
// (32768 and up), so that no process of a concurrent test is handed one of them by bind(0).
int FreePortRun(int count) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int base = 10000 + static_cast<int>((getpid() * 7919 + attempt * 104729) % 2200) * 10;
    bool free = true;
    for (int port = base; port < base + count && free; ++port) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      addr.sin_addr.s_addr = htonl(INADDR_ANY);
      free = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
      if (fd >= 0) close(fd);
    }
    if (free) return base;
  }
  return -1;
}

// The values of the lines that start with `prefix` (a histogram's `NAME_bucket{...`), in order.
std::vector<double> Values(const std::string& text, const std::string& prefix) {
  std::vector<double> values;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) values.push_back(std::stod(line.substr(line.rfind(' ') + 1)));
  }
  return values;
}

// Histogram `name{labels}` in `text`: one bucket line per bound and +Inf, cumulative counts,
// the +Inf bucket equal to the count, and at least one observation. Returns the count.
double CheckHistogram(const std::string& text, const std::string& name, const std::string& labels = "") {
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  const double count = Value(text, name + "_count" + braces);
  EXPECT_GT(count, 0) << name << braces << ":\n" << text;
  EXPECT_NE(text.find("# TYPE " + name + " histogram\n"), std::string::npos) << name;
  const std::vector<double> buckets = Values(text, name + "_bucket{" + labels + (labels.empty() ? "" : ","));
  EXPECT_EQ(buckets.size(), Histogram::SecondsBounds().size() + 1) << name << braces << ":\n" << text;
  for (size_t i = 1; i < buckets.size(); ++i) EXPECT_LE(buckets[i - 1], buckets[i]) << name << braces;
  if (!buckets.empty()) {
    EXPECT_EQ(buckets.back(), count) << name << braces;
  }
  EXPECT_EQ(Value(text, name + "_bucket{" + labels + (labels.empty() ? "" : ",") + "le=\"+Inf\"}"), count);
  EXPECT_GE(Value(text, name + "_sum" + braces), 0) << name << braces;
  return count;
}

class MetricsTest : public LaunchFixture {};

TEST_F(MetricsTest, EveryProcessAnswersWithTheDocumentedNames) {
  const auto live = LiveNames();
  ASSERT_GE(live.at("server").size(), 10u) << "docs/metrics.md's table did not parse";
  const int base = FreePortRun(5);
  ASSERT_GT(base, 0) << "no run of 5 free ports below 32768";
  Subprocess launch({BinPath("strata-launch"), "--servers", "2", "--trainers", "2",
                     std::string(STRATA_SOURCE_DIR) + "/examples/ctr.yaml", "--timeout", "200", "--set",
                     "sync.mode=hybrid", "--set", "train.steps=100000", "--set", "train.metrics_path=\"\"", "--set",
                     "server.store.path=" + dir_.File("store"), "--set", "cluster.metrics_port=" + std::to_string(base)},
                    dir_.File("launch.log"));
  // port, role, rank
  const std::vector<std::tuple<int, std::string, int>> processes = {
      {base, "scheduler", 0}, {base + 1, "server", 0}, {base + 2, "server", 1},
      {base + 3, "trainer", 0}, {base + 4, "trainer", 1}};
  std::map<int, std::string> texts;
  // Until every trainer has reported a step and the servers have answered pulls.
  const bool all = WaitFor([&] {
    for (const auto& [port, role, rank] : processes) {
      httplib::Client client("127.0.0.1", port);
      client.set_connection_timeout(1);
      auto res = client.Get("/metrics");
      if (!res || res->status != 200) return false;
      texts[port] = res->body;
    }
    return Value(texts[base + 3], "strata_trainer_step") > 0 && Value(texts[base + 4], "strata_trainer_step") > 0 &&
           Value(texts[base + 1], "strata_server_pulls_total") > 0;
  }, Millis(120000));
  launch.Signal(SIGINT);
  launch.Wait(Millis(30000));
  ASSERT_TRUE(all) << launch.Log();
  for (const auto& [port, role, rank] : processes) {
    const std::string& text = texts[port];
    for (const std::string& name : live.at(role)) {
      EXPECT_NE(text.find("\n" + name), std::string::npos) << role << " " << rank << " lacks " << name << ":\n" << text;
      EXPECT_NE(text.find("# TYPE " + name + " "), std::string::npos) << name;
    }
    EXPECT_NE(text.find("strata_up{role=\"" + role + "\",rank=\"" + std::to_string(rank) + "\"} 1"), std::string::npos)
        << text;
  }
  EXPECT_EQ(Value(texts[base], "strata_scheduler_view_epoch"), 1) << texts[base];
  EXPECT_GT(Value(texts[base + 2], "strata_server_received_bytes_total"), 0) << texts[base + 2];
  EXPECT_GT(Value(texts[base + 1], "strata_table_hits_total"), 0) << texts[base + 1];
  // The latency histograms count the traffic.
  CheckHistogram(texts[base], "strata_scheduler_request_duration_seconds");
  for (int server : {1, 2}) {
    CheckHistogram(texts[base + server], "strata_server_request_duration_seconds", "op=\"pull\"");
    CheckHistogram(texts[base + server], "strata_server_request_duration_seconds", "op=\"push\"");
  }
  for (int trainer : {3, 4}) CheckHistogram(texts[base + trainer], "strata_trainer_step_duration_seconds");
}

// --metrics-port: a server waiting for the rest of the cluster is alive (/livez) but not ready
// (/healthz 503 naming the scheduler); once the cluster is complete it is ready.
TEST_F(MetricsTest, ServerHealthzIs503UntilItServes) {
  const int port = FreePortRun(1);
  ASSERT_GT(port, 0);
  const std::vector<std::string> common = {"--set", "cluster.servers=1", "--set", "cluster.trainers=1"};
  std::vector<std::string> argv = {BinPath("strata-scheduler"), "--bind", "tcp://127.0.0.1:0", "--address-file",
                                   dir_.File("scheduler.address")};
  argv.insert(argv.end(), common.begin(), common.end());
  Subprocess scheduler(argv, dir_.File("scheduler.log"));
  std::string address;
  ASSERT_TRUE(WaitFor([&] { return static_cast<bool>(std::ifstream(dir_.File("scheduler.address")) >> address); },
                      Millis(20000))) << scheduler.Log();
  argv = {BinPath("strata-server"), "--rank", "0", "--metrics-port", std::to_string(port), "--set",
          "cluster.scheduler=" + address};
  argv.insert(argv.end(), common.begin(), common.end());
  Subprocess server(argv, dir_.File("server.log"));
  auto get = [&](const std::string& path) {
    httplib::Client client("127.0.0.1", port);
    client.set_connection_timeout(1);
    auto res = client.Get(path);
    return res ? std::pair(res->status, res->body) : std::pair(-1, std::string());
  };
  // Loading, then registered but the cluster is not complete: nobody is served yet. (The first
  // 503 may still say "loading tables": wait for the registering one.)
  ASSERT_TRUE(WaitFor([&] {
    const auto [status, body] = get("/healthz");
    return status == 503 && body.find("registering with the scheduler at " + address) != std::string::npos;
  }, Millis(20000))) << server.Log();
  EXPECT_EQ(get("/livez").first, 200);
  NodeOptions trainer;  // the last node: its registration completes the cluster
  trainer.cluster.scheduler = address;
  trainer.role = Role::kTrainer;
  Node node(trainer);
  ASSERT_TRUE(node.Join().ok());
  EXPECT_TRUE(WaitFor([&] { return get("/healthz").first == 200; }, Millis(30000))) << server.Log();
  EXPECT_EQ(get("/healthz").second, "ok\n");
  EXPECT_TRUE(node.RequestShutdown().ok());
  node.WaitForShutdown(Millis(10000));
  EXPECT_TRUE(node.Leave(Millis(5000)).ok());
  EXPECT_EQ(server.Wait(Millis(30000)), 0) << server.Log();
  EXPECT_EQ(scheduler.Wait(Millis(30000)), 0) << scheduler.Log();
}

}  // namespace
}  // namespace strata::testing
