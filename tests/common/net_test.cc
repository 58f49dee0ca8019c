// net_test.cc: reachability probes (a closed port or an unknown host fails naming host and
// port within the timeout) and the address a node bound on every interface advertises.
#include "common/net.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

namespace strata {
namespace {

using ::testing::HasSubstr;

// A port nothing listens on: bound (so no one else takes it) but never listened on.
class ClosedPort {
 public:
  ClosedPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~ClosedPort() { close(fd_); }
  int port() const { return port_; }
  void Listen() { ASSERT_EQ(listen(fd_, 4), 0); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(NetTest, ClosedPortFailsNamingHostAndPortWithinTheTimeout) {
  ClosedPort closed;
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(closed.port());
  const auto start = std::chrono::steady_clock::now();
  Status s = WaitReachable(endpoint, Millis(600));
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("host 127.0.0.1, port " + std::to_string(closed.port())));
  EXPECT_THAT(s.message(), HasSubstr("refused"));
  EXPECT_GE(took, Millis(600));
  EXPECT_LT(took, Millis(5000));
}

TEST(NetTest, UnknownHostFailsNamingIt) {
  Status s = WaitReachable("tcp://no-such-host.invalid:7000", Millis(100));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("no-such-host.invalid"));
  EXPECT_THAT(s.message(), HasSubstr("cannot resolve"));
  EXPECT_THAT(s.message(), HasSubstr("port 7000"));
}

TEST(NetTest, ListeningPortIsReachable) {
  ClosedPort port;
  port.Listen();
  EXPECT_TRUE(WaitReachable("tcp://localhost:" + std::to_string(port.port()), Millis(2000)).ok());
  EXPECT_TRUE(WaitReachable("ipc:///tmp/whatever", Millis(1)).ok());  // not tcp: nothing to probe
}

TEST(NetTest, AdvertisedAddress) {
  EXPECT_EQ(AdvertisedAddress("tcp://0.0.0.0:4100", "", "node7"), "tcp://node7:4100");
  EXPECT_EQ(AdvertisedAddress("tcp://[::]:4100", "", "node7"), "tcp://node7:4100");
  EXPECT_EQ(AdvertisedAddress("tcp://0.0.0.0:4100", "10.0.0.2", "node7"), "tcp://10.0.0.2:4100");
  EXPECT_EQ(AdvertisedAddress("tcp://10.0.0.3:4100", "", "node7"), "tcp://10.0.0.3:4100");
  EXPECT_EQ(AdvertisedAddress("ipc:///tmp/s", "x", "node7"), "ipc:///tmp/s");
  EXPECT_TRUE(IsWildcardEndpoint("tcp://0.0.0.0:1"));
  EXPECT_TRUE(IsWildcardEndpoint("tcp://*:1"));
  EXPECT_FALSE(IsWildcardEndpoint("tcp://127.0.0.1:1"));
}

}  // namespace
}  // namespace strata
