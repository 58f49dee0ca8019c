// elastic_test.cc: elastic membership's cluster half: SplitSchedule (every step's batch split
// by one membership, whoever joins or leaves), and the scheduler taking nodes into a running
// job (--join), announcing joins and departures, and leasing the data split.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <random>
#include <limits>
#include <set>

#include "cluster/split_schedule.h"
#include "tests/cluster/scheduler_fixture.h"

namespace strata {
namespace {

using testing::SchedulerTest;
using testing::WaitFor;

TEST(SplitScheduleTest, JoinsAndLeavesTakeEffectAtTheHorizon) {
  SplitSchedule s({1, 0});
  EXPECT_EQ(s.Members(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(s.Slot(1, 5), 1);
  s.Lease(10);  // steps 0..9 are fixed
  EXPECT_EQ(s.Join(2), 10);
  EXPECT_EQ(s.Members(9), (std::vector<int>{0, 1}));
  EXPECT_EQ(s.Members(10), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(s.Slot(2, 9), -1);
  EXPECT_EQ(s.Slot(2, 10), 2);
  EXPECT_EQ(s.Join(2), 10);  // already a member: nothing changes
  EXPECT_EQ(s.entries().size(), 2u);
  s.Lease(12);
  EXPECT_EQ(s.Leave(0), 12);
  EXPECT_EQ(s.Members(12), (std::vector<int>{1, 2}));
  EXPECT_EQ(s.Slot(1, 12), 0);
  // 10 steps of 2, 2 of 3, then 1 of 2.
  EXPECT_EQ(s.SlotsBefore(13), 10 * 2 + 2 * 3 + 2);
  // A join and a leave before anything is leased again fold into one entry, or none.
  EXPECT_EQ(s.Join(5), 12);
  EXPECT_EQ(s.Leave(5), 12);
  EXPECT_EQ(s.Members(100), (std::vector<int>{1, 2}));
  EXPECT_EQ(s.entries().size(), 3u);
}

TEST(SplitScheduleTest, SurvivesTheWire) {
  SplitSchedule s({0, 1});
  s.Lease(4);
  s.Join(2);
  capnp::MallocMessageBuilder b;
  auto w = b.initRoot<wire::SplitSchedule>();
  s.ToWire(w);
  const SplitSchedule back = SplitSchedule::FromWire(w.asReader());
  EXPECT_EQ(back.entries(), s.entries());
  EXPECT_EQ(back.horizon(), 4);
}

// Trainers at different speeds lease steps as they go while others join and leave: every step
// any trainer reads is split into slots 0..n-1 read once each, where n is that step's count.
TEST(SplitScheduleTest, EveryStepIsSplitByOneMembership) {
  constexpr int kLease = 3;
  SplitSchedule s({0, 1});
  std::map<int, int64_t> next;  // trainer -> its next step
  std::map<int, int64_t> leased;  // trainer -> the end of its lease
  std::map<int, SplitSchedule> held;  // trainer -> the schedule it got with its last lease
  std::map<int64_t, std::multiset<int>> read;  // step -> slots read
  std::map<int64_t, size_t> count;  // step -> the count the readers saw
  next[0] = next[1] = 0;
  std::mt19937 rng(7);
  int joined = 2;
  std::set<int> leaving;
  for (int round = 0; round < 4000; ++round) {
    if (round % 500 == 250) {  // a trainer joins: it starts where the schedule puts it
      const int r = joined++;
      next[r] = s.Join(r);
    }
    if (round % 700 == 650 && next.size() > 1) {  // the slowest trainer leaves
      int slowest = next.begin()->first;
      for (auto& [r, k] : next) {
        if (k < next[slowest] && !leaving.count(r)) slowest = r;
      }
      if (!leaving.count(slowest)) {
        s.Leave(slowest);
        held[slowest] = s;
        leaving.insert(slowest);
      }
    }
    // One trainer, chosen at random with uneven speeds, takes a step.
    auto it = next.begin();
    std::advance(it, static_cast<long>(rng() % next.size()));
    const int r = it->first;
    int64_t& k = it->second;
    if (!leaving.count(r) && (!leased.count(r) || k >= leased[r])) {
      s.Lease(k + kLease);
      leased[r] = k + kLease;
      held[r] = s;
    }
    const int slot = held[r].Slot(r, k);
    if (slot < 0) {  // not a member of this step: it left (or never joined) here
      EXPECT_TRUE(leaving.count(r)) << "trainer " << r << " is not in step " << k;
      next.erase(it);
      continue;
    }
    read[k].insert(slot);
    const size_t n = held[r].Members(k).size();
    if (count.count(k)) {
      EXPECT_EQ(count[k], n) << "step " << k;
    }
    count[k] = n;
    ++k;
  }
  // Every step that every member has passed was read once per slot.
  int64_t done = std::numeric_limits<int64_t>::max();
  for (auto& [r, k] : next) done = std::min(done, k);
  for (int64_t k = 0; k < done; ++k) {
    std::multiset<int> want;
    for (size_t i = 0; i < count[k]; ++i) want.insert(static_cast<int>(i));
    EXPECT_EQ(read[k], want) << "step " << k;
  }
  EXPECT_GT(done, 100);
  EXPECT_GT(joined, 4);
}

TEST_F(SchedulerTest, AJoinTakesTheNextRankAndEveryNodeHearsOfIt) {
  cluster_.elastic = true;
  StartScheduler(1, 2);
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.push_back(MakeNode(Role::kServer, "s"));
  nodes.push_back(MakeNode(Role::kTrainer, "t0"));
  nodes.push_back(MakeNode(Role::kTrainer, "t1"));
  std::mutex mu;
  std::vector<NodeEvent> events;
  nodes[0]->OnEvent([&](const NodeEvent& e) {
    std::lock_guard lock(mu);
    events.push_back(e);
  });
  JoinAll(nodes);
  auto t2 = MakeNode(Role::kTrainer, "t2", -1, true);
  ASSERT_TRUE(t2->Join().ok());
  EXPECT_EQ(t2->rank(), 2);
  auto s1 = MakeNode(Role::kServer, "s1", -1, true);
  ASSERT_TRUE(s1->Join().ok());
  EXPECT_EQ(s1->rank(), 1);
  std::set<uint32_t> ids;
  for (const NodeInfo& n : s1->view().nodes) ids.insert(n.id);
  EXPECT_EQ(ids.size(), 5u) << "node ids must stay unique";
  EXPECT_EQ(s1->view().Count(Role::kServer), 2);
  ASSERT_TRUE(WaitFor([&] { std::lock_guard l(mu); return events.size() >= 2; }, std::chrono::milliseconds(5000)));
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(events[0].kind, NodeEvent::Kind::kJoined);
    EXPECT_EQ(events[0].node.rank, 2);
    EXPECT_EQ(events[1].node.role, Role::kServer);
  }
  // Barriers take the joined nodes in.
  std::vector<std::future<Status>> all;
  for (Node* n : {nodes[0].get(), nodes[1].get(), nodes[2].get(), t2.get(), s1.get()}) {
    all.push_back(std::async(std::launch::async, [n] { return n->Barrier("with-joined"); }));
  }
  for (auto& f : all) EXPECT_TRUE(f.get().ok());
  // A departure is announced.
  ASSERT_TRUE(t2->Leave().ok());
  ASSERT_TRUE(WaitFor([&] { std::lock_guard l(mu); return events.size() >= 3; }, std::chrono::milliseconds(5000)));
  std::lock_guard lock(mu);
  EXPECT_EQ(events[2].kind, NodeEvent::Kind::kLeft);
  EXPECT_EQ(events[2].node.rank, 2);
}

TEST_F(SchedulerTest, TrainersLeaseTheSplitAndAJoinerStartsAtTheHorizon) {
  cluster_.elastic = true;
  StartScheduler(1, 2);
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.push_back(MakeNode(Role::kServer, "s"));
  nodes.push_back(MakeNode(Role::kTrainer, "t0"));
  nodes.push_back(MakeNode(Role::kTrainer, "t1"));
  JoinAll(nodes);
  auto lease = nodes[1]->LeaseSplit(8);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->horizon(), 8);
  auto t2 = MakeNode(Role::kTrainer, "t2", -1, true);
  ASSERT_TRUE(t2->Join().ok());
  auto joined = t2->LeaseSplit(0, wire::SplitChange::JOIN);
  ASSERT_TRUE(joined.ok()) << joined.status().ToString();
  EXPECT_EQ(joined->Slot(2, 7), -1);
  EXPECT_EQ(joined->Slot(2, 8), 2);
  ASSERT_TRUE(nodes[1]->LeaseSplit(9).ok());
  // The change comes first, from the horizon (9), then the lease: the leaver reads up to step 8.
  auto left = nodes[2]->LeaseSplit(12, wire::SplitChange::LEAVE);
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(left->Members(8), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(left->Members(9), (std::vector<int>{0, 2}));
  EXPECT_EQ(left->horizon(), 12);
  // A server is not in the split.
  auto server = nodes[0]->LeaseSplit(1);
  EXPECT_EQ(server.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(server.status().message().find("not a live trainer"), std::string::npos);
}

TEST_F(SchedulerTest, AJoinIsRefusedNamingWhatIsMissing) {
  StartScheduler(1, 1);  // not elastic
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.push_back(MakeNode(Role::kServer, "s"));
  nodes.push_back(MakeNode(Role::kTrainer, "t0"));
  JoinAll(nodes);
  auto late = MakeNode(Role::kTrainer, "late", -1, true);
  Status s = late->Join();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("cluster.elastic"), std::string::npos) << s.ToString();
  auto lease = nodes[1]->LeaseSplit(1);
  EXPECT_NE(lease.status().message().find("cluster.elastic"), std::string::npos) << lease.status().ToString();
  // A join with a rank is refused too.
  auto ranked = MakeNode(Role::kTrainer, "ranked", 0, true);
  Status r = ranked->Join();
  EXPECT_EQ(r.code(), StatusCode::kInvalidArgument) << r.ToString();
  EXPECT_NE(r.message().find("--join"), std::string::npos) << r.ToString();
}

TEST_F(SchedulerTest, AJoinBeforeTheJobStartedIsRefused) {
  cluster_.elastic = true;
  StartScheduler(1, 1);
  auto early = MakeNode(Role::kTrainer, "early", -1, true);
  Status s = early->Join();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("has not started"), std::string::npos) << s.ToString();
}

// A joined server serves only after it commits its join. One that dies before (its keys may be
// half moved) is marked left, not dead: every node takes it out of the key layout, and its
// commit, should it still come, is refused naming the rollback. One that committed and then dies
// is an ordinary dead server (its rank may come back).
TEST_F(SchedulerTest, AServerDeadBeforeItCommitsItsJoinIsRolledBackOneDeadAfterIsDead) {
  cluster_.elastic = true;
  StartScheduler(1, 1);
  std::mutex mu;  // before the nodes: their events reach the callback until they are gone
  std::vector<NodeEvent> events;
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.push_back(MakeNode(Role::kServer, "s"));
  nodes.push_back(MakeNode(Role::kTrainer, "t0"));
  nodes[1]->OnEvent([&](const NodeEvent& e) {
    std::lock_guard lock(mu);
    if (e.node.role == Role::kServer && e.kind != NodeEvent::Kind::kJoined) events.push_back(e);
  });
  JoinAll(nodes);
  auto s1 = MakeNode(Role::kServer, "s1", -1, true);
  ASSERT_TRUE(s1->Join().ok());
  {
    const ClusterView v = s1->view();
    EXPECT_TRUE(v.Find(s1->id())->joining);
  }
  s1->StopWithoutLeaving();  // dies before its commit
  ASSERT_TRUE(WaitFor([&] { std::lock_guard l(mu); return !events.empty(); }, std::chrono::milliseconds(10000)));
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(events[0].kind, NodeEvent::Kind::kLeft);
    EXPECT_EQ(events[0].node.rank, 1);
    EXPECT_TRUE(events[0].node.joining && events[0].node.left && !events[0].node.alive);
  }
  Status late = s1->CommitJoin();
  EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition) << late.ToString();
  EXPECT_NE(late.message().find("its join was rolled back"), std::string::npos) << late.ToString();

  // The next one takes rank 2 (rank 1 left for good), commits, then dies: dead, not left.
  auto s2 = MakeNode(Role::kServer, "s2", -1, true);
  ASSERT_TRUE(s2->Join().ok());
  EXPECT_EQ(s2->rank(), 2);
  ASSERT_TRUE(s2->CommitJoin().ok());
  ASSERT_TRUE(s2->CommitJoin().ok()) << "a repeated commit (its reply lost) is answered again";
  {
    const ClusterView v = *nodes[1]->RefreshView();
    EXPECT_FALSE(v.Find(s2->id())->joining);
  }
  s2->StopWithoutLeaving();
  ASSERT_TRUE(WaitFor([&] { std::lock_guard l(mu); return events.size() >= 2; }, std::chrono::milliseconds(10000)));
  std::lock_guard lock(mu);
  EXPECT_EQ(events[1].kind, NodeEvent::Kind::kDead);
  EXPECT_EQ(events[1].node.rank, 2);
  EXPECT_FALSE(events[1].node.left);
  // Commits from a trainer are refused.
  EXPECT_EQ(nodes[1]->CommitJoin().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace strata
