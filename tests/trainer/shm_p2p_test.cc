// shm_p2p_test.cc: ShmP2P between two ranks of this process (a kv map for the rendezvous): a
// message sent before its receive is posted waits for it; a receive of the wrong size fails
// naming both sizes and breaks the transfers; a receive nobody sends times out; a rank that
// could not make its segment fails the others at once instead of after their timeout.
#include "trainer/comm/shm_p2p.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {
namespace {

using Millis = std::chrono::milliseconds;

// The rendezvous: a kv map whose lookups wait.
class Kv {
 public:
  Status Set(const std::string& k, const std::string& v) {
    {
      std::lock_guard lock(mu_);
      map_[k] = v;
    }
    cv_.notify_all();
    return Status::OK();
  }
  Result<std::string> Get(const std::string& k) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, Millis(5000), [&] { return map_.contains(k); })) return Status::DeadlineExceeded(k);
    return map_[k];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> map_;
};

// Opens ranks 0 and 1 side by side.
std::vector<Result<std::unique_ptr<ShmP2P>>> OpenPair(Kv& kv, uint64_t ring0, uint64_t ring1, Millis timeout) {
  std::vector<Result<std::unique_ptr<ShmP2P>>> out;
  out.emplace_back(Status::Internal("unset"));
  out.emplace_back(Status::Internal("unset"));
  std::vector<std::thread> t;
  for (int r = 0; r < 2; ++r) {
    t.emplace_back([&, r] {
      out[r] = ShmP2P::Open(
          r, 2, r == 0 ? ring0 : ring1, timeout, [&](const std::string& k, const std::string& v) { return kv.Set(k, v); },
          [&](const std::string& k) { return kv.Get(k); });
    });
  }
  for (auto& th : t) th.join();
  return out;
}

TEST(ShmP2P, AMessageSentBeforeItsReceiveWaitsForItAndSizesMustAgree) {
  Kv kv;
  auto p = OpenPair(kv, 4096, 4096, Millis(2000));
  ASSERT_TRUE(p[0].ok()) << p[0].status().ToString();
  ASSERT_TRUE(p[1].ok()) << p[1].status().ToString();
  ShmP2P& a = **p[0];
  ShmP2P& b = **p[1];
  a.Unlink();
  b.Unlink();
  // Three messages, each fitting the 4 KiB ring, sent before anything is posted on b.
  std::vector<float> m1(100, 1.0f), m2(200, 2.0f), m3(0);
  auto s1 = a.Post(true, m1.data(), m1.size() * 4, 1, 11);
  auto s2 = a.Post(true, m2.data(), m2.size() * 4, 1, 12);
  auto s3 = a.Post(true, m3.data(), 0, 1, 13);
  EXPECT_TRUE(s1->done && s2->done && s3->done);  // all in the ring already
  // b drains them while waiting for tag 12; 11 and 13 are kept for their receives.
  std::vector<float> r2(200, 0.0f), r1(100, 0.0f);
  auto q2 = b.Post(false, r2.data(), r2.size() * 4, 0, 12);
  ASSERT_TRUE(b.Wait(*q2).ok());
  EXPECT_EQ(r2[199], 2.0f);
  auto q1 = b.Post(false, r1.data(), r1.size() * 4, 0, 11);
  EXPECT_TRUE(q1->done);
  EXPECT_EQ(r1[0], 1.0f);
  auto q3 = b.Post(false, nullptr, 0, 0, 13);
  EXPECT_TRUE(q3->done && q3->status.ok());
  // A receive of the wrong size: the error names both, and nothing works after it.
  auto s4 = a.Post(true, m1.data(), 40, 1, 14);
  std::vector<float> wrong(20);
  auto q4 = b.Post(false, wrong.data(), 80, 0, 14);
  Status bad = b.Wait(*q4);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad.ToString();
  EXPECT_NE(bad.message().find("40 bytes, the receive 80"), std::string::npos) << bad.ToString();
  auto q5 = b.Post(false, wrong.data(), 80, 0, 15);
  EXPECT_EQ(b.Wait(*q5).code(), StatusCode::kFailedPrecondition);
}

// A message still streaming in (larger than the ring) when the receive of its tag is posted is
// that receive's, in order: if the sizes disagree, that receive fails naming both, not a later one.
TEST(ShmP2P, AMessageStreamingInWhenItsReceiveIsPostedGoesToThatReceive) {
  Kv kv;
  auto p = OpenPair(kv, 4096, 4096, Millis(5000));
  ASSERT_TRUE(p[0].ok() && p[1].ok());
  ShmP2P& a = **p[0];
  ShmP2P& b = **p[1];
  std::vector<char> big(8000, 'x'), small(80, 'y');
  auto s1 = a.Post(true, big.data(), big.size(), 1, 5);  // half of it fits the ring
  EXPECT_FALSE(s1->done);
  char other = 0;
  auto unrelated = b.Post(false, &other, 1, 0, 6);  // b reads the head of tag 5's message
  std::vector<char> r1(80);
  auto q1 = b.Post(false, r1.data(), r1.size(), 0, 5);  // posted while it streams in
  std::thread sender([&] {
    EXPECT_TRUE(a.Wait(*s1).ok());
    auto s2 = a.Post(true, small.data(), small.size(), 1, 5);
    (void)a.Wait(*s2);
  });
  Status s = b.Wait(*q1);
  sender.join();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("8000 bytes, the receive 80"), std::string::npos) << s.ToString();
  EXPECT_EQ(b.Wait(*unrelated).code(), StatusCode::kFailedPrecondition);  // the failure broke the rest
}

TEST(ShmP2P, AReceiveNobodySendsTimesOut) {
  Kv kv;
  auto p = OpenPair(kv, 4096, 4096, Millis(300));
  ASSERT_TRUE(p[0].ok() && p[1].ok());
  float x = 0;
  auto q = (*p[1])->Post(false, &x, 4, 0, 1);
  const auto start = std::chrono::steady_clock::now();
  Status s = (*p[1])->Wait(*q);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_GE(std::chrono::steady_clock::now() - start, Millis(300));
}

// A peer is gone when the lock its segment's file holds for its life is free (a process that
// dies drops it; here the rank's object is destroyed, which closes the file the same way).
TEST(ShmP2P, AReceiveFromARankThatWentAwayFailsNamingIt) {
  Kv kv;
  auto p = OpenPair(kv, 4096, 4096, Millis(10000));
  ASSERT_TRUE(p[0].ok() && p[1].ok());
  (*p[0])->Unlink();
  (*p[1])->Unlink();
  float x = 0;
  auto q = (*p[1])->Post(false, &x, 4, 0, 1);
  p[0] = Status::Cancelled("rank 0 went away");  // destroys rank 0's ShmP2P
  const auto start = std::chrono::steady_clock::now();
  Status s = (*p[1])->Wait(*q);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("rank 0's process"), std::string::npos) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, Millis(2000));
}

TEST(ShmP2P, ARankThatCannotMakeItsSegmentFailsTheOthersAtOnce) {
  Kv kv;
  // Rank 1 asks for a ring too small to hold a message header's page: refused before it maps
  // anything; rank 0 learns it from the rendezvous ("-") or from the mismatch, not a timeout.
  ASSERT_TRUE(kv.Set("shm/1", "-").ok());
  const auto start = std::chrono::steady_clock::now();
  auto a = ShmP2P::Open(0, 2, 4096, Millis(5000), [&](const std::string& k, const std::string& v) { return kv.Set(k, v); },
                        [&](const std::string& k) { return kv.Get(k); });
  EXPECT_EQ(a.status().code(), StatusCode::kUnavailable) << a.status().ToString();
  EXPECT_NE(a.status().message().find("rank 1"), std::string::npos) << a.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, Millis(2000));
  EXPECT_EQ(ShmP2P::Open(0, 2, 100, Millis(10), nullptr, nullptr).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata
