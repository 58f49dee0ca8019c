// frame_batch_test.cc: BatchWriter/BatchReader/UnpackBatch round trips (frame sizes around the
// 8-byte padding, unaligned batches) and hostile batches (every truncation, lying counts and
// lengths).
#include "common/frame_batch.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "common/message.h"

namespace strata {
namespace {

std::vector<Frames> SampleMessages() {
  std::vector<Frames> messages;
  messages.push_back({Buffer::Copy("envelope-1"), Buffer::Copy(""), Buffer::Copy("1234567")});
  messages.push_back({Buffer::Copy("12345678"), Buffer::Copy("123456789")});
  messages.push_back({Buffer::Copy(std::string(1000, 'z'))});
  return messages;
}

Buffer Pack(const std::vector<Frames>& messages) {
  BatchWriter writer;
  size_t bytes = writer.bytes();
  for (const Frames& m : messages) {
    bytes += BatchWriter::BytesOf(m);
    writer.Append(m);
  }
  EXPECT_EQ(writer.messages(), messages.size());
  EXPECT_EQ(writer.bytes(), bytes);
  return writer.Finish();
}

void ExpectSame(const std::vector<Frames>& want, const std::vector<Frames>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t m = 0; m < want.size(); ++m) {
    ASSERT_EQ(want[m].size(), got[m].size()) << "message " << m;
    for (size_t f = 0; f < want[m].size(); ++f) EXPECT_EQ(want[m][f].view(), got[m][f].view()) << m << "/" << f;
  }
}

TEST(FrameBatch, ReaderGivesOneMessageAtATimeIntoTheSameList) {
  const auto messages = SampleMessages();
  const Buffer batch = Pack(messages);
  auto reader = BatchReader::Open(batch, 16);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ(reader->messages(), messages.size());
  Frames frames{Buffer::Copy("left over")};  // cleared by Next
  std::vector<Frames> got;
  while (reader->Next(&frames)) got.push_back(frames);
  ExpectSame(messages, got);
  EXPECT_TRUE(frames.empty());
  EXPECT_FALSE(reader->Next(&frames));  // stays at the end
}

TEST(FrameBatch, ReaderOfABadBatchGivesNothing) {
  // The last message's last frame is cut short: Open refuses the batch, so the two whole
  // messages before it are not delivered either.
  const Buffer batch = Pack(SampleMessages());
  auto reader = BatchReader::Open(Buffer(batch.data(), batch.size() - 8, batch.owner()), 16);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), StatusCode::kCorruption) << reader.status().ToString();
}

TEST(FrameBatch, RoundTripSharesTheBatchWithoutCopies) {
  const auto messages = SampleMessages();
  const Buffer batch = Pack(messages);
  EXPECT_TRUE(IsBatch(batch));
  EXPECT_EQ(batch.size() % 8, 0u);
  auto got = UnpackBatch(batch, 16);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectSame(messages, *got);
  for (const Frames& m : *got) {
    for (const Buffer& f : m) {
      EXPECT_GE(f.data(), batch.data());
      EXPECT_LE(f.data() + f.size(), batch.data() + batch.size());
      EXPECT_EQ(reinterpret_cast<uintptr_t>(f.data()) % 8, 0u);  // envelopes read in place
      EXPECT_EQ(f.owner(), batch.owner());
    }
  }
}

TEST(FrameBatch, UnalignedBatchIsCopiedOnceAndStillAligned) {
  const auto messages = SampleMessages();
  const Buffer aligned = Pack(messages);
  auto storage = std::make_shared<std::vector<std::byte>>(aligned.size() + 1);
  std::memcpy(storage->data() + 1, aligned.data(), aligned.size());
  const Buffer odd(storage->data() + 1, aligned.size(), storage);
  auto got = UnpackBatch(odd, 16);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectSame(messages, *got);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*got)[0][0].data()) % 8, 0u);
}

TEST(FrameBatch, EncodedEnvelopesAreNotBatches) {
  Message m;
  m.set_op(Op::ECHO);
  EXPECT_FALSE(IsBatch(Encode(m)[0]));
  EXPECT_FALSE(IsBatch(Buffer::Copy("short")));
  EXPECT_FALSE(IsBatch(Buffer()));
}

TEST(FrameBatch, EveryTruncationIsRefused) {
  const Buffer batch = Pack(SampleMessages());
  for (size_t n = 8; n < batch.size(); ++n) {
    auto got = UnpackBatch(Buffer(batch.data(), n, batch.owner()), 16);
    EXPECT_FALSE(got.ok()) << n << " of " << batch.size() << " bytes";
  }
  EXPECT_FALSE(UnpackBatch(Buffer::Copy("not a batch at all"), 16).ok());
}

// A batch's words, for writing hostile ones by hand.
Buffer Words(std::vector<uint32_t> halves) {
  std::vector<std::byte> bytes(halves.size() * 4);
  std::memcpy(bytes.data(), halves.data(), bytes.size());
  return Buffer::Take(std::move(bytes));
}

TEST(FrameBatch, LyingCountsAndLengthsAreRefusedNamingWhat) {
  const uint32_t m = 0xffffffffu, v = kBatchVersion;
  auto error = [](const Buffer& b, size_t max = 16) {
    auto got = UnpackBatch(b, max);
    return got.ok() ? std::string("accepted") : got.status().ToString();
  };
  // No messages; more messages than fit; more than allowed.
  EXPECT_NE(error(Words({m, v, 0, 0})).find("no messages"), std::string::npos);
  EXPECT_NE(error(Words({m, v, 1000000, 0, 1, 0, 0, 0}), size_t{1} << 30).find("cannot fit"), std::string::npos);
  EXPECT_NE(error(Words({m, v, 2, 0, 1, 0, 0, 0, 1, 0, 0, 0}), 1).find("exceed the limit"), std::string::npos);
  // A message without frames; frames past the end.
  EXPECT_NE(error(Words({m, v, 1, 0, 0, 0, 0, 0})).find("no frames"), std::string::npos);
  EXPECT_NE(error(Words({m, v, 1, 0, 1000, 0, 0, 0})).find("past the end"), std::string::npos);
  // A frame longer than what is left, near 2^64 (no overflow in the padding).
  EXPECT_NE(error(Words({m, v, 1, 0, 1, 0, 0xfffffff9u, 0xffffffffu})).find("claims"), std::string::npos);
  EXPECT_NE(error(Words({m, v, 1, 0, 1, 0, 9, 0, 0, 0})).find("claims"), std::string::npos);
  // Trailing bytes after the last message.
  EXPECT_NE(error(Words({m, v, 1, 0, 1, 0, 0, 0, 7, 7})).find("after the last"), std::string::npos);
  // The smallest valid batch: one message of one empty frame.
  EXPECT_EQ(error(Words({m, v, 1, 0, 1, 0, 0, 0})), "accepted");
}

TEST(FrameBatch, RandomBitFlipsNeverCrash) {
  const Buffer batch = Pack(SampleMessages());
  std::mt19937 rng(5);
  for (int i = 0; i < 2000; ++i) {
    std::vector<std::byte> bytes(batch.data(), batch.data() + batch.size());
    for (int k = 0; k < 3; ++k) {
      const size_t at = 8 + rng() % (bytes.size() - 8);  // keep the marker: reach the parser
      bytes[at] ^= std::byte(1u << (rng() % 8));
    }
    auto got = UnpackBatch(Buffer::Take(std::move(bytes)), 16);
    if (got.ok()) {
      for (const Frames& msg : *got) EXPECT_FALSE(msg.empty());
    }
  }
}

}  // namespace
}  // namespace strata
