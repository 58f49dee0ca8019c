// comm_test.cc: the Gloo communicator with 2 and 4 ranks as threads (each a Node whose kv store
// is the scheduler's, over the in-process transport; Gloo's own pairs are TCP on loopback):
// all-reduce (sum, avg, max; small and 1M floats), reduce-scatter against a CPU reference,
// all-gather, broadcast, barrier, send/recv rings, groups from a ProcessMesh, and the errors:
// bad ranks and peers, timeouts, a peer that went away.
#include "trainer/comm/gloo_communicator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <future>
#include <latch>
#include <thread>

#include "tests/trainer/inproc_trainers.h"

namespace strata {
namespace {

constexpr int kRanks = 4;

class CommTest : public InprocTrainersTest {
 protected:
  void SetUp() override {
    StartTrainers(kRanks);
  }

  // Runs `body(rank)` on ranks 0..n-1 concurrently.
  void OnRanks(int n, const std::function<void(int)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) threads.emplace_back(body, r);
    for (auto& t : threads) t.join();
  }
  void OnEveryRank(const std::function<void(int)>& body) { OnRanks(kRanks, body); }

};

TEST_F(CommTest, WorldCollectives) {
  OnEveryRank([&](int r) {
    auto comm = MakeGlooCommunicator(*nodes_[r], "world", r, kRanks);
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    Communicator& c = **comm;
    EXPECT_EQ(c.rank(), r);
    EXPECT_EQ(c.size(), kRanks);

    std::vector<float> v = {1.0f + r, 10.0f * r, -1.0f * r};
    ASSERT_TRUE(c.AllReduce(v.data(), v.size(), ReduceOp::kSum).ok());
    EXPECT_EQ(v, (std::vector<float>{10, 60, -6}));
    std::vector<float> avg = {static_cast<float>(r)};
    ASSERT_TRUE(c.AllReduce(avg.data(), 1, ReduceOp::kAvg).ok());
    EXPECT_FLOAT_EQ(avg[0], 1.5f);
    std::vector<float> mx = {static_cast<float>(r * r)};
    ASSERT_TRUE(c.AllReduce(mx.data(), 1, ReduceOp::kMax).ok());
    EXPECT_EQ(mx[0], 9.0f);

    // A large buffer goes through the ring in pieces.
    std::vector<float> big(1 << 20);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 1000) * (r + 1);
    ASSERT_TRUE(c.AllReduce(big.data(), big.size(), ReduceOp::kSum).ok());
    for (size_t i = 0; i < big.size(); i += 4099) ASSERT_EQ(big[i], static_cast<float>(i % 1000) * 10) << i;

    std::vector<float> mine = {static_cast<float>(r), static_cast<float>(-r)}, all(2 * kRanks);
    ASSERT_TRUE(c.AllGather(mine.data(), all.data(), 2).ok());
    for (int k = 0; k < kRanks; ++k) {
      EXPECT_EQ(all[2 * k], k);
      EXPECT_EQ(all[2 * k + 1], -k);
    }
    std::vector<float> b = {r == 2 ? 42.0f : 0.0f, r == 2 ? 7.0f : 0.0f};
    ASSERT_TRUE(c.Broadcast(b.data(), 2, 2).ok());
    EXPECT_EQ(b, (std::vector<float>{42, 7}));
    EXPECT_EQ(c.Broadcast(b.data(), 2, kRanks).code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(c.Barrier().ok());
  });
}

TEST_F(CommTest, GroupsFromAProcessMesh) {
  auto mesh = ProcessMesh::Megatron(/*pp=*/1, /*dp=*/2, /*tp=*/2);
  ASSERT_TRUE(mesh.ok());
  OnEveryRank([&](int r) {
    // The tensor-parallel group of this rank: {0,1} or {2,3}.
    const std::vector<int> group = mesh->GroupOf(r, "tp");
    const int index = static_cast<int>(std::find(group.begin(), group.end(), r) - group.begin());
    auto comm = MakeGlooCommunicator(*nodes_[r], "tp/" + std::to_string(group[0]), index,
                                     static_cast<int>(group.size()));
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    float x = static_cast<float>(r);
    ASSERT_TRUE((*comm)->AllReduce(&x, 1, ReduceOp::kSum).ok());
    EXPECT_EQ(x, static_cast<float>(group[0] + group[1])) << "rank " << r;
  });
}

TEST_F(CommTest, BadArgumentsAreErrors) {
  EXPECT_EQ(MakeGlooCommunicator(*nodes_[0], "x", 4, 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeGlooCommunicator(*nodes_[0], "x", 0, 0).status().code(), StatusCode::kInvalidArgument);
  // A peer that never comes: the rendezvous times out with an error, it does not hang.
  GlooOptions quick;
  quick.timeout = Millis(300);
  auto lonely = MakeGlooCommunicator(*nodes_[0], "lonely", 0, 2, quick);
  EXPECT_FALSE(lonely.ok());
}

// The same tests over groups of 2 and 4 ranks (ranks 0..n-1 of the fixture's nodes).
class CommSizesTest : public CommTest, public ::testing::WithParamInterface<int> {
 protected:
  std::unique_ptr<Communicator> Make(int rank, const std::string& name, GlooOptions options = {}) {
    auto comm = MakeGlooCommunicator(*nodes_[rank], name, rank, GetParam(), options);
    EXPECT_TRUE(comm.ok()) << comm.status().ToString();
    return comm.ok() ? std::move(*comm) : nullptr;
  }
};

INSTANTIATE_TEST_SUITE_P(Ranks, CommSizesTest, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// Small integers, so every reduction is exact in float (and kAvg divides by a power of two).
float Input(int rank, size_t j) {
  return static_cast<float>(((rank + 1) * 31 + j * 7) % 101) - 50.0f;
}

TEST_P(CommSizesTest, ReduceScatterMatchesACpuReference) {
  const int n = GetParam();
  OnRanks(n, [&](int r) {
    auto comm = Make(r, "rs");
    ASSERT_NE(comm, nullptr);
    for (size_t count : {size_t{1}, size_t{3}, size_t{7}, size_t{1001}, size_t{100003}}) {
      std::vector<float> in(n * count);
      for (size_t j = 0; j < in.size(); ++j) in[j] = Input(r, j);
      const std::vector<float> in_copy = in;
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
        std::vector<float> out(count, -1234.0f);
        Status s = comm->ReduceScatter(in.data(), out.data(), count, op);
        ASSERT_TRUE(s.ok()) << s.ToString();
        ASSERT_EQ(in, in_copy) << "the input changed";
        for (size_t i = 0; i < count; ++i) {
          const size_t j = r * count + i;  // this rank's block
          const float want = ReferenceReduce(op, n, [j](int k) { return Input(k, j); });
          ASSERT_EQ(out[i], want) << ReduceOpName(op) << " count " << count << " rank " << r
                                  << " at " << i;
        }
      }
    }
    // Nothing to reduce is not an error.
    EXPECT_TRUE(comm->ReduceScatter(nullptr, nullptr, 0, ReduceOp::kSum).ok());
  });
}

// In place, as ZeRO-1 runs them on its gradient and value buckets: the reduction lands in this
// rank's block of the input, and the gather takes its input from this rank's block of the
// output; both give the out-of-place results.
TEST_P(CommSizesTest, ReduceScatterAndAllGatherInPlace) {
  const int n = GetParam();
  OnRanks(n, [&](int r) {
    auto comm = Make(r, "inplace");
    ASSERT_NE(comm, nullptr);
    for (size_t count : {size_t{1}, size_t{7}, size_t{100003}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
        std::vector<float> buf(n * count);
        for (size_t j = 0; j < buf.size(); ++j) buf[j] = Input(r, j);
        ASSERT_TRUE(comm->ReduceScatter(buf.data(), buf.data() + r * count, count, op).ok());
        for (size_t i = 0; i < count; ++i) {
          const size_t j = r * count + i;
          ASSERT_EQ(buf[j], ReferenceReduce(op, n, [j](int k) { return Input(k, j); }))
              << ReduceOpName(op) << " count " << count << " at " << i;
        }
      }
      std::vector<float> all(n * count, -1.0f);
      for (size_t i = 0; i < count; ++i) all[r * count + i] = static_cast<float>(r * 1000 + i % 1000);
      ASSERT_TRUE(comm->AllGather(all.data() + r * count, all.data(), count).ok());
      for (int k = 0; k < n; ++k) {
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(all[k * count + i], static_cast<float>(k * 1000 + i % 1000)) << "block " << k << " at " << i;
        }
      }
    }
  });
}

// Rank r sends `count` floats to r + 1 and receives r - 1's, blocking: Send blocks until the
// peer receives, so even ranks send first and odd ranks receive first.
void RingExchange(Communicator& comm, int r, int n, size_t count) {
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  std::vector<float> mine(count), got(count, -1.0f);
  for (size_t i = 0; i < count; ++i) mine[i] = static_cast<float>(r * 1000003 + i);
  const uint32_t tag = static_cast<uint32_t>(count);
  if (r % 2 == 0) {
    ASSERT_TRUE(comm.Send(mine.data(), count, next, tag).ok());
    ASSERT_TRUE(comm.Recv(got.data(), count, prev, tag).ok());
  } else {
    ASSERT_TRUE(comm.Recv(got.data(), count, prev, tag).ok());
    ASSERT_TRUE(comm.Send(mine.data(), count, next, tag).ok());
  }
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(got[i], static_cast<float>(prev * 1000003 + i)) << "count " << count << " at " << i;
  }
}

TEST_P(CommSizesTest, SendRecvRingExchange) {
  const int n = GetParam();
  OnRanks(n, [&](int r) {
    auto comm = Make(r, "ring");
    ASSERT_NE(comm, nullptr);
    for (size_t count : {size_t{1}, size_t{5}, size_t{300007}}) ASSERT_NO_FATAL_FAILURE(RingExchange(*comm, r, n, count));
    // Point-to-point traffic between collectives does not disturb them.
    float x = 1.0f;
    ASSERT_TRUE(comm->AllReduce(&x, 1, ReduceOp::kSum).ok());
    EXPECT_EQ(x, static_cast<float>(n));
  });
}

// Posted transfers: every rank sends to both neighbours before it receives anything (what two
// pipeline stages do when each sends its result on), with messages far larger than a socket
// buffer, and nothing deadlocks; several transfers to one peer match by tag, whatever the
// order they are waited in.
TEST_P(CommSizesTest, PostedSendsBeforeReceivesDoNotDeadlock) {
  const int n = GetParam();
  OnRanks(n, [&](int r) {
    auto comm = Make(r, "posted");
    ASSERT_NE(comm, nullptr);
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    const size_t count = 4 << 20;  // 16 MiB each
    auto value = [](int from, uint32_t tag, size_t i) { return static_cast<float>(from * 7 + tag * 3 + i % 1000); };
    std::vector<std::vector<float>> out, in;
    std::vector<std::unique_ptr<Communicator::Request>> sends, recvs;
    for (uint32_t tag : {1u, 2u}) {
      out.emplace_back(count);
      for (size_t i = 0; i < count; ++i) out.back()[i] = value(r, tag, i);
      auto s = comm->ISend(out.back().data(), count, next, tag);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      sends.push_back(*std::move(s));
    }
    for (uint32_t tag : {2u, 1u}) {  // posted in the other order than sent
      in.emplace_back(count, -1.0f);
      auto rq = comm->IRecv(in.back().data(), count, prev, tag);
      ASSERT_TRUE(rq.ok()) << rq.status().ToString();
      recvs.push_back(*std::move(rq));
    }
    for (auto& q : recvs) ASSERT_TRUE(q->Wait().ok());
    for (auto& q : sends) ASSERT_TRUE(q->Wait().ok());
    for (size_t k = 0; k < 2; ++k) {
      const uint32_t tag = k == 0 ? 2u : 1u;
      for (size_t i = 0; i < count; i += 4099) ASSERT_EQ(in[k][i], value(prev, tag, i)) << "tag " << tag;
    }
    // A loss in double precision: the sum of 0.1 + rank is exact to double rounding, not float's.
    double loss = 0.1 + r;
    ASSERT_TRUE(comm->AllReduceHost(&loss, 1, ReduceOp::kAvg).ok());
    double want = 0;
    for (int k = 0; k < n; ++k) want += 0.1 + k;
    EXPECT_NEAR(loss, want / n, 1e-15);
  });
}

// The same exchanges through shared memory (every rank of the fixture is in this process, so
// on one host) with rings far smaller than the messages: blocking sends in a ring, posted sends
// before receives, tags waited in another order than sent, and an empty message; collectives
// still run on Gloo.
TEST_P(CommSizesTest, SharedMemoryCarriesMessagesLargerThanItsRings) {
  const int n = GetParam();
  GlooOptions shm;
  shm.shm_ring_bytes = 64 << 10;
  OnRanks(n, [&](int r) {
    auto comm = Make(r, "shm", shm);
    ASSERT_NE(comm, nullptr);
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    for (size_t count : {size_t{0}, size_t{1}, size_t{300007}}) ASSERT_NO_FATAL_FAILURE(RingExchange(*comm, r, n, count));
    const size_t count = 1 << 20;  // 4 MiB, 64 rings' worth
    std::vector<std::vector<float>> out, in;
    std::vector<std::unique_ptr<Communicator::Request>> sends, recvs;
    for (uint32_t tag : {7u, 8u, 9u}) {
      out.emplace_back(count, static_cast<float>(r * 100 + tag));
      auto q = comm->ISend(out.back().data(), count, next, tag);
      ASSERT_TRUE(q.ok()) << q.status().ToString();
      sends.push_back(*std::move(q));
    }
    for (uint32_t tag : {9u, 7u, 8u}) {
      in.emplace_back(count, -1.0f);
      auto q = comm->IRecv(in.back().data(), count, prev, tag);
      ASSERT_TRUE(q.ok()) << q.status().ToString();
      recvs.push_back(*std::move(q));
    }
    for (size_t k : {2u, 0u, 1u}) ASSERT_TRUE(recvs[k]->Wait().ok());
    for (auto& q : sends) ASSERT_TRUE(q->Wait().ok());
    const uint32_t order[] = {9u, 7u, 8u};
    for (size_t k = 0; k < 3; ++k) {
      for (size_t i = 0; i < count; i += 997) ASSERT_EQ(in[k][i], static_cast<float>(prev * 100 + order[k]));
    }
    float x = 1.0f;
    ASSERT_TRUE(comm->AllReduce(&x, 1, ReduceOp::kSum).ok());
    EXPECT_EQ(x, static_cast<float>(n));
  });
}

// Small all-reduces of a group on shared memory go through it (gathered on rank 0, reduced in
// rank order, sent back): every op and both host types give what Gloo's ring gives, every rank
// the same bits, interleaved with point-to-point traffic on the same rings; tags from
// kReservedTags on are refused to callers.
TEST_P(CommSizesTest, SmallAllReducesThroughSharedMemoryAgreeWithGloo) {
  const int n = GetParam();
  GlooOptions shm;
  shm.shm_ring_bytes = 64 << 10;
  OnRanks(n, [&](int r) {
    auto fast = Make(r, "small-shm", shm);
    auto ring = Make(r, "small-gloo");
    ASSERT_NE(fast, nullptr);
    ASSERT_NE(ring, nullptr);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      // Up to the bound (kShmAllReduceMaxBytes) through shared memory, one float past it on Gloo.
      constexpr size_t kBound = kShmAllReduceMaxBytes / sizeof(float);
      for (size_t count : {size_t{1}, size_t{3}, size_t{1024}, kBound, kBound + 1}) {
        std::vector<float> a(count), b(count);
        for (size_t i = 0; i < count; ++i) a[i] = b[i] = 0.1f * static_cast<float>((r + 1) * (i + 1)) - 0.05f * r;
        ASSERT_TRUE(fast->AllReduce(a.data(), count, op).ok());
        ASSERT_TRUE(ring->AllReduce(b.data(), count, op).ok());
        for (size_t i = 0; i < count; ++i) ASSERT_NEAR(a[i], b[i], 1e-5f * std::abs(b[i]) + 1e-6f) << i;
        // Every rank holds rank 0's result, bit for bit.
        std::vector<float> all(count * n);
        ASSERT_TRUE(ring->AllGather(a.data(), all.data(), count).ok());
        for (int q = 0; q < n; ++q) {
          ASSERT_EQ(std::memcmp(all.data() + q * count, a.data(), count * sizeof(float)), 0) << "rank " << q;
        }
      }
      double d = 0.25 * (r + 1), e = d;
      ASSERT_TRUE(fast->AllReduceHost(&d, 1, op).ok());
      ASSERT_TRUE(ring->AllReduceHost(&e, 1, op).ok());
      EXPECT_DOUBLE_EQ(d, e);
    }
    // Hand-offs on the same rings between the collectives still arrive whole and in place.
    ASSERT_NO_FATAL_FAILURE(RingExchange(*fast, r, n, 5000));
    double loss = r;
    ASSERT_TRUE(fast->AllReduceHost(&loss, 1, ReduceOp::kSum).ok());
    EXPECT_DOUBLE_EQ(loss, n * (n - 1) / 2.0);
    float x = 0;
    const Status reserved = fast->Send(&x, 1, (r + 1) % n, Communicator::kReservedTags + 3);
    EXPECT_EQ(reserved.code(), StatusCode::kInvalidArgument) << reserved.ToString();
    EXPECT_NE(reserved.message().find("reserved"), std::string::npos) << reserved.ToString();
  });
}

TEST_P(CommSizesTest, BadPeersAreInvalidArgumentsAndBreakNothing) {
  const int n = GetParam();
  OnRanks(n, [&](int r) {
    auto comm = Make(r, "bad");
    ASSERT_NE(comm, nullptr);
    float x = 1.0f;
    for (int peer : {-1, r, n, n + 5}) {
      Status s = comm->Send(&x, 1, peer, 0);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << peer;
      EXPECT_NE(s.message().find("rank " + std::to_string(peer)), std::string::npos)
          << s.ToString();
      EXPECT_EQ(comm->Recv(&x, 1, peer, 0).code(), StatusCode::kInvalidArgument) << peer;
    }
    EXPECT_EQ(comm->Broadcast(&x, 1, -1).code(), StatusCode::kInvalidArgument);
    ASSERT_TRUE(comm->AllReduce(&x, 1, ReduceOp::kSum).ok());
    EXPECT_EQ(x, static_cast<float>(n));
  });
}

TEST_F(CommTest, RecvTimesOutAndBreaksTheCommunicator) {
  GlooOptions quick;
  quick.timeout = Millis(500);
  std::latch done(2);
  OnRanks(2, [&](int r) {
    auto comm = MakeGlooCommunicator(*nodes_[r], "quiet", r, 2, quick);
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    if (r == 0) {
      // Rank 1 never sends.
      float x;
      Status s = (*comm)->Recv(&x, 1, 1, 7);
      EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
      EXPECT_NE(s.message().find("recv from rank 1"), std::string::npos) << s.ToString();
      Status after = (*comm)->Barrier();
      EXPECT_EQ(after.code(), StatusCode::kFailedPrecondition) << after.ToString();
    }
    done.arrive_and_wait();  // rank 1 keeps its end open until rank 0 is done
  });
}

TEST_F(CommTest, PeerThatWentAwayIsUnavailable) {
  OnRanks(2, [&](int r) {
    auto comm = MakeGlooCommunicator(*nodes_[r], "gone", r, 2);
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    ASSERT_TRUE((*comm)->Barrier().ok());
    if (r == 1) {
      comm->reset();  // closes rank 1's connections
      return;
    }
    std::vector<float> data(1000);
    Status s = (*comm)->Recv(data.data(), data.size(), 1, 0);
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
    s = (*comm)->AllReduce(data.data(), data.size(), ReduceOp::kSum);
    EXPECT_FALSE(s.ok());
  });
}

// A posted send leaves the caller at once (the communicator's sender thread writes it); a
// send to a peer that went away still fails at its Wait, naming the peer, and breaks the
// communicator, so the next operation says so instead of hanging.
TEST_F(CommTest, APostedSendToAPeerThatWentAwayFailsAtItsWait) {
  GlooOptions quick;
  quick.timeout = Millis(2000);
  OnRanks(2, [&](int r) {
    auto comm = MakeGlooCommunicator(*nodes_[r], "posted-gone", r, 2, quick);
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    ASSERT_TRUE((*comm)->Barrier().ok());
    if (r == 1) {
      comm->reset();
      return;
    }
    std::this_thread::sleep_for(Millis(200));  // rank 1's sockets are closed
    std::vector<float> data(4 << 20);         // larger than a socket buffer
    std::vector<std::unique_ptr<Communicator::Request>> sends;
    for (uint32_t tag : {1u, 2u, 3u}) {
      auto q = (*comm)->ISend(data.data(), data.size(), 1, tag);
      if (!q.ok()) {
        EXPECT_EQ(q.status().code(), StatusCode::kFailedPrecondition) << q.status().ToString();
        break;
      }
      sends.push_back(*std::move(q));
    }
    ASSERT_FALSE(sends.empty());
    Status first = sends[0]->Wait();
    EXPECT_TRUE(first.code() == StatusCode::kUnavailable || first.code() == StatusCode::kDeadlineExceeded)
        << first.ToString();
    EXPECT_NE(first.message().find("send to rank 1"), std::string::npos) << first.ToString();
    for (size_t i = 1; i < sends.size(); ++i) EXPECT_FALSE(sends[i]->Wait().ok());
    EXPECT_EQ((*comm)->Barrier().code(), StatusCode::kFailedPrecondition);
  });
}

}  // namespace
}  // namespace strata
