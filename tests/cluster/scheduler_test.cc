// scheduler_test.cc: the scheduler and node library as threads in one process over the
// in-process transport: joining, deterministic ranks, barriers, the kv store, bad and duplicate
// registrations, failure detection, rejoining, leaving and shutdown.
#include "cluster/scheduler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "tests/cluster/scheduler_fixture.h"

namespace strata {
namespace {

using testing::SchedulerTest;
using testing::WaitFor;

TEST_F(SchedulerTest, JoinGivesDeterministicRanksAndOneView) {
  StartScheduler(2, 3);
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.push_back(MakeNode(Role::kServer, "s-b"));
  nodes.push_back(MakeNode(Role::kTrainer, "t-c"));
  nodes.push_back(MakeNode(Role::kServer, "s-a"));
  nodes.push_back(MakeNode(Role::kTrainer, "t-a"));
  nodes.push_back(MakeNode(Role::kTrainer, "t-b"));
  JoinAll(nodes);
  // Ranks follow the sorted addresses, whatever order the nodes joined in.
  EXPECT_EQ(nodes[2]->rank(), 0);
  EXPECT_EQ(nodes[2]->id(), 1u);
  EXPECT_EQ(nodes[0]->rank(), 1);
  EXPECT_EQ(nodes[0]->id(), 2u);
  EXPECT_EQ(nodes[3]->rank(), 0);
  EXPECT_EQ(nodes[3]->id(), 3u);
  EXPECT_EQ(nodes[4]->rank(), 1);
  EXPECT_EQ(nodes[1]->rank(), 2);
  EXPECT_EQ(nodes[1]->id(), 5u);
  const ClusterView v = nodes[0]->view();
  EXPECT_EQ(v.epoch, 1u);
  ASSERT_EQ(v.nodes.size(), 5u);
  EXPECT_EQ(v.Count(Role::kServer), 2);
  for (const auto& n : nodes) {
    EXPECT_EQ(n->view().nodes.size(), 5u);
    const ClusterView view = n->view();
    const NodeInfo* me = view.Find(n->id());
    ASSERT_NE(me, nullptr);
    EXPECT_EQ(me->address, n->address());
    EXPECT_TRUE(me->alive);
  }
}

// A peer may learn of a node from the scheduler and call it before the node's own registration
// reply has arrived: the node's application handler sees such a request only once the node has
// its rank and view (a server working out key ownership from an empty view divided by zero).
TEST_F(SchedulerTest, RequestsBeforeTheViewAreHeldUntilJoined) {
  StartScheduler(0, 2);
  auto a = MakeNode(Role::kTrainer, "a", 0);
  std::promise<std::pair<int, int>> seen;  // a's rank and trainer count when the handler ran
  a->SetRequestHandler([&](Request r) {
    seen.set_value({a->rank(), a->view().Count(Role::kTrainer)});
    r.ReplyError(Status::Unimplemented("test"));
  });
  auto a_joined = std::async(std::launch::async, [&] { return a->Join(); });
  ASSERT_TRUE(WaitFor([&] { return hub_.bound("a"); }, std::chrono::seconds(10)));

  RawClient peer = Raw();
  Message stats;
  stats.set_op(Op::GET_STATS);
  Ticket call = peer.rpc->Call(*peer.rpc->Connect("mem://a"), std::move(stats));
  auto handled = seen.get_future();
  // a is still waiting for the second trainer: the request is held.
  EXPECT_EQ(handled.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);

  auto b = MakeNode(Role::kTrainer, "b", 1);
  ASSERT_TRUE(b->Join().ok());
  ASSERT_TRUE(a_joined.get().ok());
  ASSERT_EQ(handled.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(handled.get(), std::make_pair(0, 2));
  EXPECT_EQ(call.Wait(Millis(10000)).status().code(), StatusCode::kUnimplemented);
}

TEST_F(SchedulerTest, RequestedRanksAreKept) {
  StartScheduler(1, 3);
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.push_back(MakeNode(Role::kServer, "s"));
  nodes.push_back(MakeNode(Role::kTrainer, "t-a", 2));
  nodes.push_back(MakeNode(Role::kTrainer, "t-b"));
  nodes.push_back(MakeNode(Role::kTrainer, "t-c"));
  JoinAll(nodes);
  EXPECT_EQ(nodes[1]->rank(), 2);
  EXPECT_EQ(nodes[2]->rank(), 0);
  EXPECT_EQ(nodes[3]->rank(), 1);
}

TEST_F(SchedulerTest, BarriersReleaseWhenEveryMemberArrives) {
  StartScheduler(2, 2);
  std::vector<std::unique_ptr<Node>> nodes;
  for (auto name : {"s0", "s1"}) nodes.push_back(MakeNode(Role::kServer, name));
  for (auto name : {"t0", "t1"}) nodes.push_back(MakeNode(Role::kTrainer, name));
  JoinAll(nodes);

  // The first server waits alone until the second arrives.
  auto first = std::async(std::launch::async,
                          [&] { return nodes[0]->Barrier("servers-only", wire::BarrierScope::SERVERS); });
  EXPECT_EQ(first.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  // Entering the same barrier twice is an error, and a trainer is not in its scope.
  EXPECT_EQ(nodes[0]->Barrier("servers-only", wire::BarrierScope::SERVERS).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(nodes[2]->Barrier("servers-only", wire::BarrierScope::SERVERS).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(nodes[1]->Barrier("servers-only", wire::BarrierScope::SERVERS).ok());
  EXPECT_TRUE(first.get().ok());

  std::vector<std::future<Status>> all;
  for (auto& n : nodes) all.push_back(std::async(std::launch::async, [&n] { return n->Barrier("all"); }));
  for (auto& f : all) EXPECT_TRUE(f.get().ok());
  // A barrier name can be reused once released.
  all.clear();
  for (auto& n : nodes) all.push_back(std::async(std::launch::async, [&n] { return n->Barrier("all"); }));
  for (auto& f : all) EXPECT_TRUE(f.get().ok());
}

TEST_F(SchedulerTest, KvStore) {
  StartScheduler(1, 1);
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.push_back(MakeNode(Role::kServer, "s"));
  nodes.push_back(MakeNode(Role::kTrainer, "t"));
  JoinAll(nodes);
  ASSERT_TRUE(nodes[0]->KvSet("nccl/id", std::string("\0\1\2", 3)).ok());
  auto got = nodes[1]->KvGet("nccl/id");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, std::string("\0\1\2", 3));
  EXPECT_EQ(nodes[1]->KvGet("absent").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(nodes[1]->KvGet("absent", Millis(50)).status().code(), StatusCode::kDeadlineExceeded);
  // A waiting get is answered by a later set.
  auto waiting = std::async(std::launch::async, [&] { return nodes[1]->KvGet("later", Millis(10000)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(nodes[0]->KvSet("later", "v").ok());
  auto later = waiting.get();
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  EXPECT_EQ(*later, "v");
  EXPECT_EQ(nodes[0]->KvSet("", "v").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(nodes[0]->KvSet("big", std::string(2 << 20, 'x')).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(nodes[0]->KvGet("x", Millis(3600000)).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SchedulerTest, BadAndDuplicateRegistrationsGetClearErrors) {
  StartScheduler(2, 1);
  RawClient raw = Raw();
  auto call = [&](Message m) { return raw.rpc->CallAndWait(raw.scheduler, std::move(m)).status(); };
  Status s = call(Register(wire::Role::SCHEDULER, "mem://x"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("role scheduler"), std::string::npos) << s.ToString();
  s = call(Register(wire::Role::SERVER, "udp://x:1"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("udp://x:1"), std::string::npos) << s.ToString();
  s = call(Register(wire::Role::SERVER, "mem://x", 5));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("rank 5"), std::string::npos) << s.ToString();
  // Heartbeats and barriers from strangers are refused.
  Message hb;
  hb.set_op(Op::HEARTBEAT);
  EXPECT_EQ(call(std::move(hb)).code(), StatusCode::kFailedPrecondition);

  // A real server registers (and waits for the rest); a second process claims its address.
  auto s0 = MakeNode(Role::kServer, "s0", 0);
  auto s0_join = std::async(std::launch::async, [&] { return s0->Join(); });
  ASSERT_TRUE(WaitFor([&] { return hub_.bound("s0"); }, Millis(5000)));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  s = call(Register(wire::Role::SERVER, "mem://s0", -1, 999999));
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find("mem://s0"), std::string::npos) << s.ToString();
  s = call(Register(wire::Role::SERVER, "mem://other", 0, 999999));
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find("rank 0"), std::string::npos) << s.ToString();

  // The scheduler kept serving: the cluster still forms.
  auto s1 = MakeNode(Role::kServer, "s1");
  auto t0 = MakeNode(Role::kTrainer, "t0");
  auto s1_join = std::async(std::launch::async, [&] { return s1->Join(); });
  ASSERT_TRUE(t0->Join().ok());
  ASSERT_TRUE(s0_join.get().ok());
  ASSERT_TRUE(s1_join.get().ok());
  // The cluster is full now.
  s = call(Register(wire::Role::TRAINER, "mem://extra"));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("none of them is dead"), std::string::npos) << s.ToString();
}

TEST_F(SchedulerTest, SilentNodeIsDeclaredDeadAndMayRejoin) {
  StartScheduler(1, 2);
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.push_back(MakeNode(Role::kServer, "s"));
  nodes.push_back(MakeNode(Role::kTrainer, "t0", 0));
  std::mutex mu;
  std::vector<NodeEvent> events;
  nodes[0]->OnEvent([&](const NodeEvent& e) {
    std::lock_guard lock(mu);
    events.push_back(e);
  });
  // Trainer 1 registers by hand and never heartbeats.
  RawClient silent = Raw();
  ASSERT_TRUE(silent.rpc->Bind("mem://t1").ok());
  Ticket reg = silent.rpc->Call(silent.scheduler, Register(wire::Role::TRAINER, "mem://t1", 1));
  JoinAll(nodes);
  auto registered = reg.Wait(Millis(5000));
  ASSERT_TRUE(registered.ok()) << registered.status().ToString();

  // A barrier waiting for the silent trainer fails, naming it, once it is declared dead.
  Status barrier = nodes[0]->Barrier("step");
  EXPECT_EQ(barrier.code(), StatusCode::kAborted);
  EXPECT_NE(barrier.message().find("trainer 1"), std::string::npos) << barrier.ToString();
  ASSERT_TRUE(WaitFor([&] { std::lock_guard l(mu); return !events.empty(); }, Millis(5000)));
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(events[0].kind, NodeEvent::Kind::kDead);
    EXPECT_EQ(events[0].node.role, Role::kTrainer);
    EXPECT_EQ(events[0].node.rank, 1);
    EXPECT_FALSE(events[0].view.Find(Role::kTrainer, 1)->alive);
  }
  // Every node hears of it, each in its own time.
  EXPECT_TRUE(WaitFor(
      [&] {
        const ClusterView v = nodes[1]->view();
        return !v.Find(Role::kTrainer, 1)->alive;
      },
      Millis(5000)));

  // It comes back (a restarted process, same rank) and everyone hears of it.
  auto back = MakeNode(Role::kTrainer, "t1-again", 1);
  ASSERT_TRUE(back->Join().ok());
  EXPECT_EQ(back->rank(), 1);
  ASSERT_TRUE(WaitFor([&] { std::lock_guard l(mu); return events.size() >= 2; }, Millis(5000)));
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(events[1].kind, NodeEvent::Kind::kRejoined);
    EXPECT_EQ(events[1].node.incarnation, 1u);
    EXPECT_EQ(events[1].node.address, "mem://t1-again");
  }
  std::vector<std::future<Status>> all;
  for (Node* n : {nodes[0].get(), nodes[1].get(), back.get()}) {
    all.push_back(std::async(std::launch::async, [n] { return n->Barrier("after"); }));
  }
  for (auto& f : all) EXPECT_TRUE(f.get().ok());

  // The first process wakes up (it had stalled): what it says of itself as incarnation 0 is
  // refused, naming the newer process, and its deregister cannot take that one out of the job.
  silent.rpc->set_node_id(registered->reader().getBody().getRegisterReply().getNodeId());
  auto as_incarnation = [&](auto set_body, uint32_t incarnation) {
    Message m;
    set_body(m);
    m.set_incarnation(incarnation);
    return silent.rpc->CallAndWait(silent.scheduler, std::move(m)).status();
  };
  auto heartbeat = [](Message& m) { m.set_op(Op::HEARTBEAT); };
  auto deregister = [](Message& m) { m.set_op(Op::DEREGISTER); };
  for (Status old : {as_incarnation(heartbeat, 0), as_incarnation(deregister, 0)}) {
    EXPECT_EQ(old.code(), StatusCode::kFailedPrecondition) << old.ToString();
    EXPECT_NE(old.message().find(std::string(kSuperseded) + " (incarnation 1 at mem://t1-again"), std::string::npos)
        << old.ToString();
    EXPECT_NE(old.message().find("trainer 1 (node "), std::string::npos) << old.ToString();
  }
  EXPECT_TRUE(back->RefreshView()->Find(Role::kTrainer, 1)->alive);
  EXPECT_TRUE(as_incarnation(heartbeat, 1).ok());
  EXPECT_TRUE(as_incarnation(heartbeat, kIncarnationNotSaid).ok());  // a node that does not say
  EXPECT_TRUE(back->SchedulerStatus().ok());
}

TEST_F(SchedulerTest, LeavingEndsTheJob) {
  StartScheduler(1, 1);
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.push_back(MakeNode(Role::kServer, "s"));
  nodes.push_back(MakeNode(Role::kTrainer, "t"));
  JoinAll(nodes);
  EXPECT_FALSE(scheduler_->WaitDone(Millis(10)));
  ASSERT_TRUE(nodes[0]->Leave().ok());
  EXPECT_FALSE(scheduler_->WaitDone(Millis(10)));
  ASSERT_TRUE(nodes[1]->Leave().ok());
  EXPECT_TRUE(scheduler_->WaitDone(Millis(5000)));
}

TEST_F(SchedulerTest, ShutdownReachesEveryNode) {
  StartScheduler(1, 2);
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.push_back(MakeNode(Role::kServer, "s"));
  nodes.push_back(MakeNode(Role::kTrainer, "t0"));
  nodes.push_back(MakeNode(Role::kTrainer, "t1"));
  JoinAll(nodes);
  ASSERT_TRUE(nodes[1]->RequestShutdown().ok());
  for (auto& n : nodes) EXPECT_TRUE(n->WaitForShutdown(Millis(5000)));
  EXPECT_TRUE(scheduler_->WaitDone(Millis(5000)));
}

}  // namespace
}  // namespace strata
