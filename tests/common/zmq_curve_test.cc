// zmq_curve_test.cc: ZmqTransport with CURVE on real sockets (loopback): a client with an
// authorized key is answered; a client without CURVE and one with an unknown key get nothing
// through (their calls time out, the handler never runs), and the authorized one is still
// answered afterwards.
#include <gtest/gtest.h>

#include <atomic>

#include "common/curve.h"
#include "common/rpc.h"
#include "common/transport.h"
#include "echo_server.h"
#include "test_util.h"

namespace strata {
namespace {

Message Echo() {
  Message m;
  m.set_op(Op::ECHO);
  return m;
}

TransportOptions WithKeys(const CurveKeys& keys) {
  TransportOptions o;
  o.curve = keys;
  return o;
}

TEST(ZmqCurveTransport, OnlyAuthorizedClientKeysGetThrough) {
  ASSERT_TRUE(CurveSupported());
  testing::TempDir dir;
  ASSERT_TRUE(GenerateCurveKeys(dir.File("job"), {"member"}).ok());
  ASSERT_TRUE(GenerateCurveKeys(dir.File("other"), {"outsider"}).ok());
  auto job = LoadCurveKeys({dir.File("job/server.key"), dir.File("job/member.key"), dir.File("job/authorized_keys")});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  // The outsider knows the job's server key but presents a key of its own.
  auto outsider = job.value();
  auto outsider_key = ReadCurveKeypair(dir.File("other/outsider.key"));
  ASSERT_TRUE(outsider_key.ok());
  outsider.client = *outsider_key;

  testing::EchoServer server(WithKeys(*job));
  ASSERT_FALSE(server.address().empty());
  const std::string address = server.address();

  auto call = [&](const TransportOptions& o, Millis timeout) {
    auto t = MakeTransport(address, o);
    EXPECT_TRUE(t.ok());
    RpcEndpoint client(std::move(t).value());
    auto peer = client.Connect(address);
    EXPECT_TRUE(peer.ok());
    return client.CallAndWait(*peer, Echo(), timeout).status();
  };
  Status member = call(WithKeys(*job), Millis(10000));
  EXPECT_TRUE(member.ok()) << member.ToString();
  EXPECT_EQ(server.handled(), 1);

  Status keyless = call(TransportOptions{}, Millis(1500));
  EXPECT_EQ(keyless.code(), StatusCode::kDeadlineExceeded) << keyless.ToString();
  Status unknown = call(WithKeys(outsider), Millis(1500));
  EXPECT_EQ(unknown.code(), StatusCode::kDeadlineExceeded) << unknown.ToString();
  EXPECT_EQ(server.handled(), 1);  // neither reached the handler

  Status still = call(WithKeys(*job), Millis(10000));
  EXPECT_TRUE(still.ok()) << still.ToString();
  EXPECT_EQ(server.handled(), 2);
}

}  // namespace
}  // namespace strata
