// connection_limit_test.cc: transport.max_connections_per_host. ConnectionLimit's count (a
// connection counted against its host until closed; a reused descriptor or a host-less peer
// miscounts nothing), and ZmqTransport on real loopback sockets: with a bound of 3, three
// clients holding connections are answered, a fourth and fifth from the same host get nothing
// through (their handshakes are refused, the handler never runs), and once one of the three
// closes, a new client is answered again.
#include "common/connection_limit.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "common/rpc.h"
#include "common/transport.h"
#include "echo_server.h"
#include "test_util.h"

namespace strata {
namespace {

TEST(ConnectionLimitTest, CountsOpenConnectionsPerHost) {
  ConnectionLimit limit(2);
  limit.Opened(10, "10.0.0.1");
  limit.Opened(11, "10.0.0.1");
  limit.Opened(12, "10.0.0.2");
  limit.Opened(13, "");  // an ipc peer: not counted
  EXPECT_EQ(limit.Open("10.0.0.1"), 2);
  EXPECT_TRUE(limit.Admit("10.0.0.1"));  // at the bound, counting the one asking
  limit.Opened(14, "10.0.0.1");
  EXPECT_FALSE(limit.Admit("10.0.0.1"));
  EXPECT_TRUE(limit.Admit("10.0.0.2"));  // other hosts are not affected
  EXPECT_TRUE(limit.Admit(""));
  EXPECT_EQ(limit.refused(), 1u);
  limit.Closed(14);
  EXPECT_TRUE(limit.Admit("10.0.0.1"));
  limit.Closed(14);  // closed twice: nothing more
  limit.Closed(99);  // never counted
  EXPECT_EQ(limit.Open("10.0.0.1"), 2);
  limit.Opened(10, "10.0.0.2");  // descriptor 10 reused before its close was seen
  EXPECT_EQ(limit.Open("10.0.0.1"), 1);
  EXPECT_EQ(limit.Open("10.0.0.2"), 2);

  ConnectionLimit unbounded(0);
  for (int fd = 0; fd < 100; ++fd) unbounded.Opened(fd, "10.0.0.1");
  EXPECT_TRUE(unbounded.Admit("10.0.0.1"));
}

Message Echo() {
  Message m;
  m.set_op(Op::ECHO);
  return m;
}

TEST(ConnectionLimitTest, AHostPastTheBoundGetsNothingThroughUntilOneOfItsConnectionsCloses) {
  TransportOptions bounded;
  bounded.max_connections_per_host = 3;
  testing::EchoServer server(bounded);
  ASSERT_FALSE(server.address().empty());
  const std::string address = server.address();

  // Each client is a process's transport: one connection, held while it lives.
  auto call = [&](std::unique_ptr<RpcEndpoint>* client, Millis timeout) {
    auto t = MakeTransport(address, TransportOptions{});
    EXPECT_TRUE(t.ok());
    *client = std::make_unique<RpcEndpoint>(std::move(t).value());
    auto peer = (*client)->Connect(address);
    EXPECT_TRUE(peer.ok());
    return (*client)->CallAndWait(*peer, Echo(), timeout).status();
  };
  std::vector<std::unique_ptr<RpcEndpoint>> held(3);
  for (auto& c : held) {
    Status s = call(&c, Millis(10000));
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_EQ(server.handled(), 3);
  for (int i = 0; i < 2; ++i) {
    std::unique_ptr<RpcEndpoint> crowd;
    Status s = call(&crowd, Millis(1500));
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  }
  EXPECT_EQ(server.handled(), 3);  // neither reached the handler

  held[0].reset();  // one connection closes: the host may open one again
  std::unique_ptr<RpcEndpoint> next;
  EXPECT_TRUE(testing::WaitFor([&] { return call(&next, Millis(1000)).ok(); }, Millis(20000)));
  EXPECT_EQ(server.handled(), 4);
}

}  // namespace
}  // namespace strata
