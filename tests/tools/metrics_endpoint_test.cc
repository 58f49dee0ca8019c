// metrics_endpoint_test.cc: MetricsEndpoint's /healthz (200 while ready, 503 and the reason
// otherwise), /livez (200 whatever the readiness) and /metrics over real HTTP on loopback, and
// which port a process takes (--metrics-port beats cluster.metrics_port's offsets).
#include "tools/metrics_endpoint.h"

#include <gtest/gtest.h>
#include <httplib.h>

namespace strata {
namespace {

struct Got {
  int status = -1;
  std::string body;
};

Got Get(int port, const std::string& path) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  auto res = client.Get(path);
  if (!res) return {};
  return {res->status, res->body};
}

TEST(MetricsEndpointTest, HealthzFollowsReadinessAndLivezAnswersAlways) {
  MetricsRegistry registry;
  MetricsEndpoint endpoint("server", 3, &registry);
  endpoint.SetReady(false, "loading tables");
  ASSERT_TRUE(endpoint.Start(0, "127.0.0.1").ok());
  ASSERT_GT(endpoint.port(), 0);

  Got health = Get(endpoint.port(), "/healthz");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(health.body, "not ready: loading tables\n");
  EXPECT_EQ(Get(endpoint.port(), "/livez").status, 200);

  endpoint.SetReady(false, "registering with the scheduler at tcp://s:7000");
  EXPECT_NE(Get(endpoint.port(), "/healthz").body.find("registering with the scheduler"), std::string::npos);

  endpoint.SetReady(true);
  health = Get(endpoint.port(), "/healthz");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, "ok\n");
  const Got metrics = Get(endpoint.port(), "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("strata_up{role=\"server\",rank=\"3\"} 1"), std::string::npos) << metrics.body;
  EXPECT_EQ(Get(endpoint.port(), "/nope").status, 404);
}

TEST(MetricsEndpointTest, ReadyByDefault) {
  MetricsRegistry registry;
  MetricsEndpoint endpoint("scheduler", 0, &registry);
  ASSERT_TRUE(endpoint.Start(0, "127.0.0.1").ok());
  EXPECT_EQ(Get(endpoint.port(), "/healthz").status, 200);
}

TEST(MetricsEndpointTest, ATakenPortIsAnErrorNamingIt) {
  MetricsRegistry registry;
  MetricsEndpoint first("scheduler", 0, &registry), second("server", 0, &registry);
  ASSERT_TRUE(first.Start(0, "127.0.0.1").ok());
  const Status s = second.Start(first.port(), "127.0.0.1");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find(":" + std::to_string(first.port())), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("--metrics-port"), std::string::npos) << s.ToString();
}

TEST(MetricsEndpointTest, TheFlagBeatsTheJobsOffsets) {
  EXPECT_EQ(ProcessMetricsPort(0, 9100, Role::kScheduler, 0, 2), 9100);
  EXPECT_EQ(ProcessMetricsPort(0, 9100, Role::kServer, 1, 2), 9102);
  EXPECT_EQ(ProcessMetricsPort(0, 9100, Role::kTrainer, 1, 2), 9104);
  EXPECT_EQ(ProcessMetricsPort(0, 0, Role::kTrainer, 1, 2), 0);  // off
  EXPECT_EQ(ProcessMetricsPort(9090, 9100, Role::kTrainer, 1, 2), 9090);
  EXPECT_EQ(ProcessMetricsPort(9090, 0, Role::kServer, 5, 2), 9090);
}

}  // namespace
}  // namespace strata
