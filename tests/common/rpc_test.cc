// rpc_test.cc: RpcEndpoint details that do not depend on the transport: deferred replies,
// replies after the endpoint is gone (and one-way requests kept past it), failing calls to a
// dead peer, handlers without replies.
#include "common/rpc.h"

#include <gtest/gtest.h>

#include <future>

#include "common/inproc_transport.h"

namespace strata {
namespace {

Message Echo() {
  Message m;
  m.set_op(Op::ECHO);
  return m;
}

std::unique_ptr<RpcEndpoint> Endpoint(InprocHub& hub) {
  return std::make_unique<RpcEndpoint>(std::make_unique<InprocTransport>(&hub));
}

TEST(Rpc, DeferredReplyFromAnotherThread) {
  InprocHub hub;
  auto server = Endpoint(hub);
  std::promise<Request> held;
  server->SetHandler([&](Request r) { held.set_value(std::move(r)); });
  ASSERT_TRUE(server->Bind("mem://s").ok());
  auto client = Endpoint(hub);
  auto peer = client->Connect("mem://s");
  ASSERT_TRUE(peer.ok());
  Ticket t = client->Call(*peer, Echo());
  Request r = held.get_future().get();
  EXPECT_FALSE(t.done());
  std::thread([&] { r.Reply(r.MakeReply()); }).join();
  EXPECT_TRUE(t.Wait(Millis(5000)).ok());
}

TEST(Rpc, SenderIdIsStamped) {
  InprocHub hub;
  auto server = Endpoint(hub);
  server->set_node_id(5);
  std::atomic<uint32_t> seen{0};
  server->SetHandler([&](Request r) {
    seen = r.message().sender();
    r.Reply(r.MakeReply());
  });
  ASSERT_TRUE(server->Bind("mem://s").ok());
  auto client = Endpoint(hub);
  client->set_node_id(9);
  auto peer = client->Connect("mem://s");
  auto reply = client->CallAndWait(*peer, Echo());
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(seen.load(), 9u);
  EXPECT_EQ(reply->sender(), 5u);
}

TEST(Rpc, ErrorReplyBecomesStatus) {
  InprocHub hub;
  auto server = Endpoint(hub);
  server->SetHandler([](Request r) { r.ReplyError(Status::NotFound("no table 'emb'")); });
  ASSERT_TRUE(server->Bind("mem://s").ok());
  auto client = Endpoint(hub);
  auto peer = client->Connect("mem://s");
  auto reply = client->CallAndWait(*peer, Echo());
  EXPECT_EQ(reply.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(reply.status().message(), "no table 'emb'");
}

TEST(Rpc, NoHandlerMeansUnimplemented) {
  InprocHub hub;
  auto server = Endpoint(hub);
  ASSERT_TRUE(server->Bind("mem://s").ok());
  auto client = Endpoint(hub);
  auto peer = client->Connect("mem://s");
  EXPECT_EQ(client->CallAndWait(*peer, Echo()).status().code(), StatusCode::kUnimplemented);
}

TEST(Rpc, FailCallsToPeer) {
  InprocHub hub;
  auto server = Endpoint(hub);
  server->SetHandler([](Request) {});  // never answers
  ASSERT_TRUE(server->Bind("mem://s").ok());
  auto client = Endpoint(hub);
  auto peer = client->Connect("mem://s");
  Ticket a = client->Call(*peer, Echo(), Millis(60000));
  Ticket b = client->Call(*peer, Echo(), Millis(60000));
  client->FailCallsTo(*peer, Status::Unavailable("server 0 is dead"));
  EXPECT_EQ(a.Wait(Millis(1000)).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(b.Wait(Millis(1000)).status().message(), "server 0 is dead");
}

TEST(Rpc, ReplyAfterServerShutdownIsHarmless) {
  InprocHub hub;
  auto server = Endpoint(hub);
  std::promise<Request> held;
  server->SetHandler([&](Request r) { held.set_value(std::move(r)); });
  ASSERT_TRUE(server->Bind("mem://s").ok());
  auto client = Endpoint(hub);
  auto peer = client->Connect("mem://s");
  Ticket t = client->Call(*peer, Echo(), Millis(200));
  Request r = held.get_future().get();
  server.reset();
  r.Reply(r.MakeReply());  // must not crash
  EXPECT_EQ(t.Wait(Millis(5000)).status().code(), StatusCode::kDeadlineExceeded);
}

TEST(Rpc, AOneWayRequestKeptPastItsEndpointIsHarmless) {
  // A one-way request holds no reference to its endpoint: kept after the endpoint is gone, every
  // answer is still a no-op, and its reply skeleton names no sender.
  InprocHub hub;
  auto server = Endpoint(hub);
  server->set_node_id(5);
  std::promise<Request> held;
  server->SetHandler([&](Request&& r) { held.set_value(std::move(r)); });
  ASSERT_TRUE(server->Bind("mem://s").ok());
  auto client = Endpoint(hub);
  auto peer = client->Connect("mem://s");
  ASSERT_TRUE(client->Notify(*peer, Echo()).ok());
  Request r = held.get_future().get();
  EXPECT_TRUE(r.one_way());
  server.reset();
  client.reset();
  EXPECT_EQ(r.MakeReply().sender(), kUnassignedNode);
  EXPECT_EQ(r.message().op(), Op::ECHO);
  r.Reply(r.MakeReply());
  r.ReplyError(Status::Internal("nobody asked"));
}

TEST(Rpc, AnsweringTwiceSendsOnce) {
  InprocHub hub;
  auto server = Endpoint(hub);
  server->SetHandler([](Request r) {
    r.Reply(r.MakeReply());
    r.ReplyError(Status::Internal("second answer"));
  });
  ASSERT_TRUE(server->Bind("mem://s").ok());
  auto client = Endpoint(hub);
  auto peer = client->Connect("mem://s");
  EXPECT_TRUE(client->CallAndWait(*peer, Echo()).ok());
}

}  // namespace
}  // namespace strata
