// message_test.cc: the envelope codec: round trips, zero-copy payloads, and garbage in every
// form (truncated, oversized, inconsistent, random, bit-flipped) giving a Status, never a crash.
#include "common/message.h"

#include <capnp/any.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "test_util.h"

namespace strata {
namespace {

Message MakeRegister(std::vector<float> payload) {
  Message m;
  auto b = m.builder();
  b.setRequestId(42);
  b.setSender(7);
  auto r = b.getBody().initRegister();
  r.setRole(wire::Role::SERVER);
  r.setAddress("tcp://127.0.0.1:4000");
  r.setRequestedRank(2);
  r.setHostname("host");
  const int64_t n = static_cast<int64_t>(payload.size());
  m.AddPayload(DType::kF32, {n / 2, 2}, Buffer::Take(std::move(payload)));
  m.AddBytes(Buffer::Copy("keys"));
  return m;
}

// Copies each frame into fresh storage, as a network would.
Frames Reallocate(const Frames& frames) {
  Frames out;
  for (const auto& f : frames) out.push_back(Buffer::Copy(f.data(), f.size()));
  return out;
}

TEST(Message, RoundTrip) {
  Message m = MakeRegister({1, 2, 3, 4, 5, 6});
  auto decoded = Decode(Reallocate(Encode(m)));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  const Message& d = *decoded;
  EXPECT_EQ(d.op(), Op::REGISTER);
  EXPECT_EQ(d.request_id(), 42u);
  EXPECT_EQ(d.sender(), 7u);
  EXPECT_FALSE(d.is_reply());
  auto r = d.reader().getBody().getRegister();
  EXPECT_EQ(r.getRole(), wire::Role::SERVER);
  EXPECT_STREQ(r.getAddress().cStr(), "tcp://127.0.0.1:4000");
  EXPECT_EQ(r.getRequestedRank(), 2);
  ASSERT_EQ(d.num_payloads(), 2u);
  auto p0 = d.payload_info(0);
  EXPECT_EQ(p0.dtype, DType::kF32);
  EXPECT_EQ(p0.shape, (std::vector<int64_t>{3, 2}));
  const float* f = reinterpret_cast<const float*>(p0.buffer->data());
  EXPECT_EQ(f[5], 6.0f);
  EXPECT_EQ(d.payload(1).view(), "keys");
}

TEST(Message, PayloadsTravelWithoutCopies) {
  Message m = MakeRegister({1, 2});
  Frames frames = Encode(m);
  const std::byte* original = frames[1].data();
  auto decoded = Decode(std::move(frames));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->payload(0).data(), original);
}

TEST(Message, UnalignedEnvelopeDecodes) {
  Message m = MakeRegister({1, 2});
  Frames frames = Encode(m);
  auto storage = std::make_shared<std::vector<std::byte>>(frames[0].size() + 1);
  std::memcpy(storage->data() + 1, frames[0].data(), frames[0].size());
  frames[0] = Buffer(storage->data() + 1, frames[0].size(), storage);
  auto decoded = Decode(std::move(frames));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->request_id(), 42u);
}

TEST(Message, ErrorReplyCarriesStatus) {
  Message req = MakeRegister({1, 2});
  Message reply = req.MakeErrorReply(3, Status::AlreadyExists("rank 2 is taken"));
  auto decoded = Decode(Encode(reply));
  ASSERT_TRUE(decoded.ok());
  EXPECT_TRUE(decoded->is_reply());
  EXPECT_EQ(decoded->request_id(), 42u);
  EXPECT_EQ(decoded->status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(decoded->status().message(), "rank 2 is taken");
}

TEST(Message, EmptyAndTruncatedEnvelopes) {
  EXPECT_EQ(Decode({}).status().code(), StatusCode::kCorruption);
  Message m = MakeRegister({1, 2});
  Frames frames = Encode(m);
  const Buffer env = frames[0];
  for (size_t len = 0; len < env.size(); ++len) {
    Frames cut = frames;
    cut[0] = Buffer::Copy(env.data(), len);
    auto r = Decode(cut);
    EXPECT_FALSE(r.ok()) << "prefix of " << len << " bytes decoded";
  }
}

TEST(Message, PayloadsMustMatchTheEnvelope) {
  Message m = MakeRegister({1, 2, 3, 4});
  Frames frames = Encode(m);
  {
    Frames missing(frames.begin(), frames.end() - 1);
    auto r = Decode(missing);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("describes 2 payloads but 1 frames"), std::string::npos)
        << r.status().ToString();
  }
  {
    Frames extra = frames;
    extra.push_back(Buffer::Copy("x"));
    EXPECT_EQ(Decode(extra).status().code(), StatusCode::kInvalidArgument);
  }
  {
    Frames short_payload = frames;
    short_payload[1] = Buffer::Copy(frames[1].data(), frames[1].size() - 4);
    auto r = Decode(short_payload);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("payload 0"), std::string::npos);
  }
}

TEST(Message, RejectsOutOfRangeFieldsAndSizes) {
  auto encode_desc = [](uint16_t dtype, std::vector<uint64_t> shape, uint64_t bytes) {
    Message m;
    auto descs = m.builder().initPayloads(1);
    descs[0].setDtype(static_cast<wire::DType>(dtype));
    auto s = descs[0].initShape(static_cast<unsigned>(shape.size()));
    for (unsigned i = 0; i < shape.size(); ++i) s.set(i, shape[i]);
    descs[0].setByteSize(bytes);
    Frames f = Encode(m);
    f.push_back(Buffer::Copy(std::string(bytes < 64 ? bytes : 0, 'x')));
    return f;
  };
  EXPECT_NE(Decode(encode_desc(99, {4}, 4)).status().message().find("dtype 99"), std::string::npos);
  EXPECT_EQ(Decode(encode_desc(0, {1ull << 62, 1ull << 62}, 0)).status().code(),
            StatusCode::kInvalidArgument);  // shape overflow
  EXPECT_EQ(Decode(encode_desc(0, std::vector<uint64_t>(9, 1), 4)).status().code(),
            StatusCode::kInvalidArgument);  // too many dims
  {
    Message m;
    m.builder().setStatus(static_cast<wire::StatusCode>(200));
    EXPECT_NE(Decode(Encode(m)).status().message().find("status code"), std::string::npos);
  }
  {
    Message m;
    m.builder().getBody().initBarrier().setScope(static_cast<wire::BarrierScope>(7));
    EXPECT_NE(Decode(Encode(m)).status().message().find("scope"), std::string::npos);
  }
  {
    Message m;
    m.builder().getBody().initRegister().setAddress(std::string(2000, 'a'));
    WireLimits small;
    small.max_text_bytes = 1000;
    EXPECT_NE(Decode(Encode(m), small).status().message().find("register.address"), std::string::npos);
  }
  {
    Message m = MakeRegister({1, 2});
    WireLimits small;
    small.max_envelope_bytes = 64;
    EXPECT_NE(Decode(Encode(m), small).status().message().find("exceeds the limit"), std::string::npos);
    small = WireLimits{};
    small.max_payloads = 1;
    EXPECT_EQ(Decode(Encode(m), small).status().code(), StatusCode::kInvalidArgument);
  }
}

// Touches everything a handler may read, to prove a decoded message is safe to read.
void ReadEverything(const Message& m) {
  auto env = m.reader();
  (void)m.status();
  (void)env.getErrorMessage();
  for (size_t i = 0; i < m.num_payloads(); ++i) (void)m.payload_info(i);
  auto body = env.getBody();
  switch (body.which()) {
    case Op::REGISTER: (void)body.getRegister().getAddress(); break;
    case Op::BARRIER: (void)body.getBarrier().getName(); break;
    case Op::KV_SET: (void)body.getKvSet().getValue(); break;
    case Op::NODE_EVENT: (void)body.getNodeEvent().getView().getNodes(); break;
    default: break;
  }
}

TEST(Message, RandomAndBitFlippedInputNeverCrash) {
  std::mt19937_64 rng(12345);
  Message m = MakeRegister({1, 2, 3, 4});
  const Frames valid = Encode(m);
  int decoded_ok = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    Frames f = Reallocate(valid);
    std::vector<std::byte> env(f[0].data(), f[0].data() + f[0].size());
    if (iter % 2 == 0) {
      for (int flips = 1 + rng() % 4; flips > 0; --flips) {
        env[rng() % env.size()] ^= std::byte(1u << (rng() % 8));
      }
    } else {
      env.resize(8 * (1 + rng() % 32));
      for (auto& b : env) b = std::byte(rng());
    }
    f[0] = Buffer::Take(std::move(env));
    auto r = Decode(std::move(f));
    if (r.ok()) {
      ++decoded_ok;
      ReadEverything(*r);
    }
    (void)PeekRequestId(valid[0]);
  }
  // Some bit flips land in harmless places; most garbage must be refused.
  EXPECT_LT(decoded_ok, 20000);
}

TEST(Message, PeekRequestId) {
  Message m = MakeRegister({1, 2});
  EXPECT_EQ(PeekRequestId(Encode(m)[0]), 42u);
  Message reply = m.MakeReply(1);
  EXPECT_FALSE(PeekRequestId(Encode(reply)[0]).has_value());
  EXPECT_FALSE(PeekRequestId(Buffer::Copy("garbage!")).has_value());
}

TEST(Message, OpNames) {
  EXPECT_EQ(OpName(Op::REGISTER), "register");
  EXPECT_EQ(OpName(static_cast<Op>(999)), "");
}

}  // namespace
}  // namespace strata

// Inputs the fuzzer found (tests/fuzz/corpus/regression-*), in the fuzzer's framing: byte 0 holds
// the frame count (bits 0-3), then n-1 little-endian uint32 lengths, then the frames' bytes.
namespace strata {
namespace {

Frames FuzzFrames(const std::string& bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t left = bytes.size();
  if (left == 0) return {};
  const int n = p[0] & 0x0f;
  ++p;
  --left;
  std::vector<size_t> lengths;
  for (int i = 0; i + 1 < n; ++i) {
    uint32_t len = 0;
    if (left >= 4) {
      std::memcpy(&len, p, 4);
      p += 4;
      left -= 4;
    }
    lengths.push_back(len);
  }
  Frames frames;
  for (int i = 0; i < n; ++i) {
    const size_t len = i + 1 < n ? std::min<size_t>(lengths[i], left) : left;
    frames.push_back(Buffer::Copy(p, len));
    p += len;
    left -= len;
  }
  return frames;
}

class MessageFuzzRegression : public ::testing::TestWithParam<std::string> {};

// Each input once crashed a reader of a decoded message; now it is refused as Corruption, or it
// decodes and can be read and forwarded (re-encoded) without an exception.
TEST_P(MessageFuzzRegression, IsRefusedOrSafeToReadAndForward) {
  const std::string path = std::string(STRATA_SOURCE_DIR) + "/tests/fuzz/corpus/" + GetParam();
  const std::string bytes = testing::ReadFile(path);
  ASSERT_FALSE(bytes.empty()) << "missing " << path;
  auto r = Decode(FuzzFrames(bytes));
  if (!r.ok()) {
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
    return;
  }
  EXPECT_NO_THROW({
    ReadEverything(*r);
    auto again = Decode(Encode(*r));
    EXPECT_TRUE(again.ok()) << again.status().ToString();
  });
}

TEST(Message, WrongPointerKindsAndCapabilitiesAreCorruption) {
  for (const char* name : {"regression-kvValue-not-bytes", "regression-capability-pointer",
                           "regression-migrate-left-wrong-list"}) {
    auto r = Decode(FuzzFrames(testing::ReadFile(std::string(STRATA_SOURCE_DIR) +
                                                 "/tests/fuzz/corpus/" + name)));
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << name << ": " << r.status().ToString();
  }
}

// A chunked migration's cursors (migrate.cursor, migrateRows.next) sent as lists instead of
// structs: Decode refuses them as Corruption instead of a handler's read throwing.
TEST(Message, MigrateCursorsOfTheWrongPointerKindAreCorruption) {
  {
    Message m;
    m.builder().getBody().initMigrate().setServers(3);
    // MigrateRequest's pointers: left, cursor.
    capnp::toAny(m.builder().getBody().getMigrate()).getPointerSection()[1].initAs<capnp::List<uint32_t>>(2);
    auto r = Decode(Encode(m));
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
  }
  {
    Message m;
    m.builder().getBody().initMigrateRows().setRows(1);
    // MigrateRows' pointers: tables, trainerClocks, left, next.
    capnp::toAny(m.builder().getBody().getMigrateRows()).getPointerSection()[3].initAs<capnp::List<uint32_t>>(2);
    auto r = Decode(Encode(m));
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
  }
  Message ok;
  auto cursor = ok.builder().getBody().initMigrate().initCursor();
  cursor.setTable(4);
  cursor.setRow(9);
  auto r = Decode(Encode(ok));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->reader().getBody().getMigrate().getCursor().getRow(), 9u);
}

INSTANTIATE_TEST_SUITE_P(Corpus, MessageFuzzRegression,
                         ::testing::Values("regression-kvValue-not-bytes",
                                           "regression-traversal-limit",
                                           "regression-capability-pointer",
                                           "regression-migrate-left-wrong-list"));

// A large, honest view survives being read several times and forwarded (the traversal budget
// used to run out).
TEST(Message, LargeViewCanBeReadRepeatedlyAndForwarded) {
  Message m;
  auto nodes = m.builder().getBody().initView().initNodes(1000);
  for (unsigned i = 0; i < 1000; ++i) nodes[i].setAddress("tcp://10.0.0.1:" + std::to_string(i));
  auto decoded = Decode(Encode(m));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  for (int pass = 0; pass < 5; ++pass) {
    for (auto n : decoded->reader().getBody().getView().getNodes()) (void)n.getAddress();
  }
  auto again = Decode(Encode(*decoded));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->reader().getBody().getView().getNodes().size(), 1000u);
}

}  // namespace
}  // namespace strata
