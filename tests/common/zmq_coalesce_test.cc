// zmq_coalesce_test.cc: ZmqTransport's coalescing of small messages under a stream
// (TransportOptions::coalesce_us): a stream leaves in large batches, in order and complete, and a
// message with nothing queued before it is not held back. The receiving side is a raw ZeroMQ
// ROUTER, so each batch the transport sent is seen as the one ZeroMQ message it is.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/frame_batch.h"
#include "common/transport.h"
#include "common/zmq_transport.h"

namespace strata {
namespace {

using std::chrono::steady_clock;

// A raw ROUTER on a free loopback port, and our transport connected to it.
class CoalesceTest : public ::testing::Test {
 protected:
  void Open(const TransportOptions& options) {
    router_.set(zmq::sockopt::linger, 0);
    router_.set(zmq::sockopt::rcvtimeo, 10000);
    router_.bind("tcp://127.0.0.1:*");
    auto t = MakeTransport("tcp://127.0.0.1:0", options);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    transport_ = std::move(t).value();
    transport_->SetReceiver([](const Source&, Frames) {});
    auto peer = transport_->Connect(router_.get(zmq::sockopt::last_endpoint));
    ASSERT_TRUE(peer.ok()) << peer.status().ToString();
    peer_ = *peer;
  }

  void TearDown() override {
    if (transport_) transport_->Shutdown();
  }

  static Frames Numbered(uint64_t i) { return {Buffer::Copy(&i, sizeof(i))}; }

  // Receives ZeroMQ messages until `count` of ours have arrived; checks that they are numbered
  // first, first + 1, ... and returns how many ZeroMQ messages (batches or lone messages) carried
  // them.
  size_t ReceiveInOrder(uint64_t first, uint64_t count) {
    size_t zmq_messages = 0;
    uint64_t next = first;
    std::vector<zmq::message_t> parts;
    while (next < first + count) {
      parts.clear();
      if (!zmq::recv_multipart(router_, std::back_inserter(parts))) {
        ADD_FAILURE() << "timed out after message " << next << " of " << first + count;
        return zmq_messages;
      }
      ++zmq_messages;
      if (parts.size() != 2) {
        ADD_FAILURE() << "expected [route, frame], got " << parts.size() << " parts";
        return zmq_messages;
      }
      Buffer frame = Buffer::Copy(parts[1].data(), parts[1].size());
      std::vector<Frames> messages;
      if (IsBatch(frame)) {
        auto unpacked = UnpackBatch(frame, ZmqTransport::kMaxBatchMessages);
        if (!unpacked.ok()) {
          ADD_FAILURE() << unpacked.status().ToString();
          return zmq_messages;
        }
        messages = std::move(unpacked).value();
      } else {
        messages.push_back({frame});
      }
      for (const Frames& m : messages) {
        uint64_t got = ~uint64_t{0};
        if (m.size() == 1 && m[0].size() == sizeof(got)) std::memcpy(&got, m[0].data(), sizeof(got));
        if (got != next) {
          ADD_FAILURE() << "expected message " << next << ", got " << got;
          return zmq_messages;
        }
        ++next;
      }
    }
    return zmq_messages;
  }

  zmq::context_t context_{1};
  zmq::socket_t router_{context_, zmq::socket_type::router};
  std::unique_ptr<Transport> transport_;
  PeerId peer_ = kNoPeer;
};

// A stream of 20,000 small messages leaves in batches of a hundred or more on average: once a
// wake-up of the I/O thread has found a stream (the first 2,000, sent flat out, queue faster
// than it wakes), it takes the queue at most every 50 ms. The rest come one every 2 us or so:
// without coalescing the I/O thread would wake for every few of them (the pause is what keeps
// them from filling whole batches on their own, as one thread sending flat out does). The long
// interval keeps the stream a stream on a loaded machine: only a sender descheduled for most of
// 50 ms would leave a take with too few messages to stay one.
TEST_F(CoalesceTest, AStreamLeavesInLargeBatchesInOrder) {
  TransportOptions options;
  options.coalesce_us = 50000;
  Open(options);
  constexpr uint64_t kMessages = 20000, kFlatOut = 2000;
  for (uint64_t i = 0; i < kMessages; ++i) {
    ASSERT_TRUE(transport_->Send(peer_, Numbered(i)).ok());
    if (i < kFlatOut) continue;
    const auto until = steady_clock::now() + std::chrono::microseconds(2);
    while (steady_clock::now() < until) {
    }
  }
  const size_t batches = ReceiveInOrder(0, kMessages);
  EXPECT_LE(batches, kMessages / 100) << "messages per batch: " << kMessages / std::max<size_t>(batches, 1);
}

// A message with nothing queued before it leaves at once, however long the coalescing interval:
// here one of 60 s (far beyond what a job may set), which a message held back would wait out
// past the receive timeout of 10 s.
TEST_F(CoalesceTest, ALoneMessageIsNotHeldBack) {
  TransportOptions options;
  options.coalesce_us = 60'000'000;
  Open(options);
  for (uint64_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(transport_->Send(peer_, Numbered(i)).ok());
    EXPECT_EQ(ReceiveInOrder(i, 1), 1u);
  }
}

}  // namespace
}  // namespace strata
