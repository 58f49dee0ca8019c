// message_test.cc: the envelope codec: round trips, zero-copy payloads, and garbage in every
// form (truncated, oversized, inconsistent, random, bit-flipped) giving a Status, never a crash.
#include "common/message.h"

#include <capnp/any.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "common/envelope.h"
#include "test_util.h"

namespace strata {
namespace {

Message MakeRegister(std::vector<float> payload) {
  Message m;
  m.set_request_id(42);
  m.set_sender(7);
  auto r = m.builder().getBody().initRegister();
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

// An envelope written by hand: an echo with one payload described by (dtype, shape, bytes),
// followed by a frame of `bytes` bytes (none when that is absurd).
Frames HandWritten(uint16_t dtype, std::vector<uint64_t> shape, uint64_t bytes) {
  envelope::Header h{};
  h.magic = envelope::kMagic;
  h.op = static_cast<uint16_t>(Op::ECHO);
  h.payloads = 1;
  const envelope::Desc d{static_cast<uint8_t>(dtype), static_cast<uint8_t>(shape.size()), 0, 0, bytes};
  std::string env(sizeof(h), '\0');
  std::memcpy(env.data(), &h, sizeof(h));
  env.append(reinterpret_cast<const char*>(&d), sizeof(d));
  env.append(reinterpret_cast<const char*>(shape.data()), shape.size() * sizeof(uint64_t));
  return {Buffer::Copy(env), Buffer::Copy(std::string(bytes < 64 ? bytes : 0, 'x'))};
}

// The envelope frame of `frames` with its header's field at `offset` set to `value`.
template <typename T>
Frames Patched(Frames frames, size_t offset, T value) {
  std::string env(frames[0].view());
  std::memcpy(env.data() + offset, &value, sizeof(value));
  frames[0] = Buffer::Copy(env);
  return frames;
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

// Payload frames are never copied, and a received message is sent on with its envelope frame as
// it came (shared, not rebuilt).
TEST(Message, PayloadsAndReceivedEnvelopesTravelWithoutCopies) {
  Message m = MakeRegister({1, 2});
  Frames frames = Encode(m);
  const std::byte* envelope = frames[0].data();
  const std::byte* original = frames[1].data();
  auto decoded = Decode(std::move(frames));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->payload(0).data(), original);
  const Frames again = Encode(*decoded);
  EXPECT_EQ(again[0].data(), envelope);
  auto twice = Decode(again);
  ASSERT_TRUE(twice.ok()) << twice.status().ToString();
  EXPECT_STREQ(twice->reader().getBody().getRegister().getAddress().cStr(), "tcp://127.0.0.1:4000");
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

// An op without a body is a header, its descriptors and nothing else: no Cap'n Proto.
TEST(Message, VoidOpsTravelWithoutABody) {
  Message m(Op::ECHO);
  m.AddBytes(Buffer::Copy("four"));
  const Frames frames = Encode(std::move(m));
  EXPECT_EQ(frames[0].size(), sizeof(envelope::Header) + sizeof(envelope::Desc) + sizeof(uint64_t));
  auto d = Decode(frames);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->op(), Op::ECHO);
  EXPECT_EQ(d->reader().getBody().which(), Op::EMPTY);  // an empty reader: every field default
  EXPECT_EQ(d->payload(0).view(), "four");
}

TEST(Message, HeaderFieldsRoundTrip) {
  Message m;
  m.set_request_id(1ull << 40);
  m.set_reply(true);
  m.set_sender(5);
  m.set_shard(3);
  m.set_origin(9);
  m.set_incarnation(2);
  m.set_status(Status::Unavailable("shard 3 moved"));
  m.builder().getBody().initKvGet().setKey("k");
  const Frames frames = Encode(m);
  // The 13-byte error text follows the header, zero-padded to a word.
  EXPECT_EQ(frames[0].view().substr(sizeof(envelope::Header), 16), std::string("shard 3 moved\0\0\0", 16));
  auto d = Decode(frames);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->op(), Op::KV_GET);
  EXPECT_EQ(d->request_id(), 1ull << 40);
  EXPECT_TRUE(d->is_reply());
  EXPECT_EQ(d->sender(), 5u);
  EXPECT_EQ(d->shard(), 3);
  EXPECT_EQ(d->origin(), 9u);
  EXPECT_EQ(d->incarnation(), 2u);
  EXPECT_EQ(d->status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(d->status().message(), "shard 3 moved");
  EXPECT_STREQ(d->reader().getBody().getKvGet().getKey().cStr(), "k");
  Message plain;
  auto p = Decode(Encode(plain));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->shard(), -1);
  EXPECT_EQ(p->origin(), kUnassignedNode);
  EXPECT_EQ(p->incarnation(), kUnassignedNode);
  EXPECT_EQ(p->sender(), kUnassignedNode);
}

TEST(Message, PayloadShapesOfEveryRank) {
  Message m(Op::VALUES);
  m.AddPayload(DType::kF32, {}, Buffer::Take(std::vector<float>{1}));
  m.AddPayload(DType::kI64, {2, 1, 3}, Buffer::Take(std::vector<int64_t>(6, 7)));
  m.AddPayload(DType::kU8, {0}, Buffer());
  m.AddPayload(DType::kBF16, {1, 1, 1, 1, 1, 1, 1, 2}, Buffer::Take(std::vector<uint16_t>(2)));
  const std::vector<std::vector<int64_t>> shapes = {{}, {2, 1, 3}, {0}, {1, 1, 1, 1, 1, 1, 1, 2}};
  for (size_t i = 0; i < shapes.size(); ++i) EXPECT_EQ(m.payload_info(i).shape, shapes[i]) << i;
  auto d = Decode(Encode(m));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->num_payloads(), 4u);
  for (size_t i = 0; i < shapes.size(); ++i) EXPECT_EQ(d->payload_info(i).shape, shapes[i]) << i;
  EXPECT_EQ(d->payload_info(1).dtype, DType::kI64);
  EXPECT_EQ(d->payload_info(3).dtype, DType::kBF16);
}

// The header's op and the body's member must agree, and a body comes exactly with the ops that
// have one.
TEST(Message, HeaderAndBodyMustAgree) {
  Message kv;
  kv.builder().getBody().initKvGet().setKey("k");
  const Frames get = Encode(kv);
  const size_t op_at = offsetof(envelope::Header, op);
  auto mismatch = Decode(Patched(get, op_at, static_cast<uint16_t>(Op::KV_SET)));
  EXPECT_EQ(mismatch.status().code(), StatusCode::kCorruption);
  EXPECT_NE(mismatch.status().message().find("header says kvSet"), std::string::npos) << mismatch.status().ToString();
  auto extra = Decode(Patched(get, op_at, static_cast<uint16_t>(Op::ECHO)));
  EXPECT_NE(extra.status().message().find("echo carries no body"), std::string::npos) << extra.status().ToString();
  auto missing = Decode(Patched(Encode(Message(Op::ECHO)), op_at, static_cast<uint16_t>(Op::KV_GET)));
  EXPECT_NE(missing.status().message().find("kvGet needs a body"), std::string::npos) << missing.status().ToString();
  // A void op set through the builder still travels without a body.
  Message echo;
  echo.builder().getBody().setEcho();
  EXPECT_EQ(Encode(echo)[0].size(), sizeof(envelope::Header));
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
  ASSERT_TRUE(Decode(HandWritten(0, {2}, 8)).ok()) << Decode(HandWritten(0, {2}, 8)).status().ToString();
  EXPECT_NE(Decode(HandWritten(99, {4}, 4)).status().message().find("dtype 99"), std::string::npos);
  EXPECT_EQ(Decode(HandWritten(0, {1ull << 62, 1ull << 62}, 0)).status().code(),
            StatusCode::kInvalidArgument);  // shape overflow
  EXPECT_EQ(Decode(HandWritten(0, std::vector<uint64_t>(9, 1), 4)).status().code(),
            StatusCode::kInvalidArgument);  // too many dims
  const Frames echo = Encode(Message(Op::ECHO));
  EXPECT_NE(Decode(Patched(echo, offsetof(envelope::Header, status), uint16_t{200})).status().message().find("status code"),
            std::string::npos);
  EXPECT_NE(Decode(Patched(echo, offsetof(envelope::Header, op), uint16_t{999})).status().message().find("unknown op 999"),
            std::string::npos);
  EXPECT_EQ(Decode(Patched(echo, offsetof(envelope::Header, magic), uint32_t{0x12345678})).status().code(),
            StatusCode::kCorruption);
  EXPECT_EQ(Decode(Patched(echo, offsetof(envelope::Header, flags), uint16_t{2})).status().code(),
            StatusCode::kCorruption);
  EXPECT_EQ(Decode(Patched(echo, offsetof(envelope::Header, error_bytes), uint32_t{1})).status().code(),
            StatusCode::kCorruption);  // error text past the envelope
  EXPECT_EQ(Decode(Patched(echo, offsetof(envelope::Header, body_words), uint32_t{1})).status().code(),
            StatusCode::kCorruption);  // a body past the envelope
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
