// message_fuzzer.cc: libFuzzer target for the wire codec (common/message.h) and the transport's
// frame batches (common/frame_batch.h). Splits the input into frames, runs PeekRequestId and
// Decode, and on success reads everything a handler may read, answers it the way the echo
// handler does and re-encodes it; or unpacks the first frame as a batch and does that to each
// message in it. Any crash, sanitizer report, uncaught exception or broken promise of the
// decoder or the unpacker (STRATA_CHECK) is a bug in them.
//
// Input framing (make_corpus.cc writes it; keep the two in step):
//   byte 0    bits 0-3: frame count n (0..15)
//             bit 4:    the first frame starts at an odd address (Decode's and UnpackBatch's
//                       copy paths)
//             bit 5:    tight WireLimits (small enough for the fuzzer to reach every limit)
//             bit 6:    the first frame is a batch of messages, as ZmqTransport sends small ones
//   then      n-1 little-endian uint32 lengths, for every frame but the last; each is clamped
//             to the bytes left, and missing ones read as 0
//   then      the frames' bytes in order; the last frame takes whatever remains
// Each frame gets its own exact-size heap block, so AddressSanitizer sees any read past it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/envelope.h"
#include "common/frame_batch.h"
#include "common/message.h"
#include "ps/bsp_moves.h"

namespace strata {
namespace {

constexpr uint8_t kFrameCountMask = 0x0f;
constexpr uint8_t kUnalignedEnvelope = 0x10;
constexpr uint8_t kTightLimits = 0x20;
constexpr uint8_t kBatch = 0x40;
// The messages a fuzzed batch may hold (the transport's own limit is kMaxBatchMessages).
constexpr size_t kMaxFuzzBatchMessages = 64;

// Reads through `sink` so the compiler cannot drop the loads we want the sanitizers to check.
volatile uint64_t sink = 0;

void Consume(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t sum = 0;
  for (size_t i = 0; i < size; ++i) sum += p[i];
  sink = sink + sum;
}

void Consume(uint64_t value) { sink = sink + value; }

// An exact-size copy of `size` bytes; `misalign` puts it at an odd address.
Buffer FrameCopy(const uint8_t* data, size_t size, bool misalign) {
  const size_t offset = misalign ? 1 : 0;
  auto block = std::shared_ptr<std::byte[]>(new std::byte[size + offset]);
  if (size) std::memcpy(block.get() + offset, data, size);
  return Buffer(block.get() + offset, size, block);
}

Frames SplitFrames(const uint8_t* data, size_t size, uint8_t flags) {
  const size_t n = flags & kFrameCountMask;
  std::vector<size_t> lengths;
  size_t pos = 0;
  for (size_t i = 0; i + 1 < n; ++i) {
    uint32_t len = 0;
    if (pos + 4 <= size) {
      len = static_cast<uint32_t>(data[pos]) | static_cast<uint32_t>(data[pos + 1]) << 8 |
            static_cast<uint32_t>(data[pos + 2]) << 16 | static_cast<uint32_t>(data[pos + 3]) << 24;
    }
    pos = std::min(size, pos + 4);
    lengths.push_back(len);
  }
  Frames frames;
  for (size_t i = 0; i < n; ++i) {
    const size_t left = size - pos;
    const size_t len = i + 1 < n ? std::min<size_t>(lengths[i], left) : left;
    frames.push_back(FrameCopy(data + pos, len, i == 0 && (flags & kUnalignedEnvelope)));
    pos += len;
  }
  return frames;
}

WireLimits Limits(uint8_t flags) {
  WireLimits limits;
  if (flags & kTightLimits) {
    limits.max_envelope_bytes = 4096;
    limits.max_payloads = 4;
    limits.max_payload_bytes = 4096;
    limits.max_payload_dims = 2;
    limits.max_text_bytes = 16;
  }
  return limits;
}

// A migrateRows or stateTransfer's BSP accumulations (ps/bsp_moves.h), as a receiving server
// reads them (an entry's size from its key; some keys refused). What reads back must write and
// read again the same.
void TouchBspMoves(const Message& m) {
  if (m.op() != Op::MIGRATE_ROWS && m.op() != Op::STATE_TRANSFER) return;
  const auto body = m.op() == Op::MIGRATE_ROWS ? m.reader().getBody().getMigrateRows()
                                               : m.reader().getBody().getStateTransfer();
  const size_t tables = body.getBsp().size();
  const size_t first = m.num_payloads() - std::min(m.num_payloads(), tables);
  auto floats = [](uint32_t table, uint64_t key) -> Result<uint32_t> {
    if (key % 97 == 13) return Status::InvalidArgument("key " + std::to_string(key) + " of table " + std::to_string(table));
    return static_cast<uint32_t>(key % 5);
  };
  auto moves = ReadBspMoves(m, body, first, floats);
  if (!moves.ok()) {
    STRATA_CHECK(!moves.status().ok());
    return Consume(moves.status().ToString().size());
  }
  Message out;
  WriteBspMoves(*moves, out.builder().getBody().initMigrateRows(), &out);
  auto back = ReadBspMoves(out, out.reader().getBody().getMigrateRows(), 0, floats);
  STRATA_CHECK(back.ok()) << back.status().ToString();
  // The same bits (a NaN sum is not equal to itself).
  STRATA_CHECK_EQ(back->tables.size(), moves->tables.size());
  for (size_t i = 0; i < back->tables.size(); ++i) {
    const BspTableState &a = back->tables[i], &b = moves->tables[i];
    STRATA_CHECK(a.table == b.table && a.applied_clock == b.applied_clock && a.chunk_next == b.chunk_next);
    STRATA_CHECK_EQ(a.entries.size(), b.entries.size());
    for (size_t j = 0; j < a.entries.size(); ++j) {
      const BspEntry &x = a.entries[j], &y = b.entries[j];
      STRATA_CHECK(x.clock == y.clock && x.key == y.key && x.staged_by == y.staged_by && x.pushes == y.pushes);
      STRATA_CHECK(std::memcmp(&x.lr, &y.lr, sizeof(float)) == 0);
      STRATA_CHECK(x.sum.size() == y.sum.size() &&
                   (x.sum.empty() || std::memcmp(x.sum.data(), y.sum.data(), x.sum.size() * sizeof(float)) == 0));
    }
  }
  STRATA_CHECK_EQ(back->clocks.size(), moves->clocks.size());
  STRATA_CHECK(back->dead_ranks == moves->dead_ranks);
  STRATA_CHECK(back->grad_scales == moves->grad_scales);
  Consume(moves->entries());
}

void TouchText(capnp::Text::Reader text, const WireLimits& limits) {
  STRATA_CHECK_LE(text.size(), limits.max_text_bytes);
  STRATA_CHECK_EQ(text.cStr()[text.size()], '\0');
  Consume(text.cStr(), text.size() + 1);
}

void TouchNode(wire::NodeInfo::Reader node, const WireLimits& limits) {
  Consume(node.getId());
  STRATA_CHECK_LT(static_cast<int>(node.getRole()), 4) << "role out of range";
  Consume(static_cast<uint64_t>(node.getRank()));
  TouchText(node.getAddress(), limits);
  Consume(node.getAlive());
  Consume(node.getIncarnation());
  Consume(node.getLeft());
}

void TouchView(wire::ClusterView::Reader view, const WireLimits& limits) {
  Consume(view.getEpoch());
  for (auto node : view.getNodes()) TouchNode(node, limits);
}

// Every field of every op, the way a handler would read it.
void TouchBody(wire::Envelope::Body::Reader body, const WireLimits& limits) {
  STRATA_CHECK(!OpName(body.which()).empty()) << "unknown op decoded";
  switch (body.which()) {
    case Op::REGISTER: {
      auto r = body.getRegister();
      STRATA_CHECK_LT(static_cast<int>(r.getRole()), 4);
      TouchText(r.getAddress(), limits);
      Consume(static_cast<uint64_t>(r.getRequestedRank()));
      TouchText(r.getHostname(), limits);
      Consume(r.getPid());
      return;
    }
    case Op::REGISTER_REPLY: {
      auto r = body.getRegisterReply();
      Consume(r.getNodeId());
      Consume(static_cast<uint64_t>(r.getRank()));
      TouchView(r.getView(), limits);
      Consume(r.getHeartbeatIntervalMs());
      Consume(r.getHeartbeatTimeoutMs());
      return;
    }
    case Op::VIEW:
      return TouchView(body.getView(), limits);
    case Op::BARRIER: {
      auto b = body.getBarrier();
      STRATA_CHECK_LT(static_cast<int>(b.getScope()), 3);
      return TouchText(b.getName(), limits);
    }
    case Op::HEARTBEAT_REPLY:
      return Consume(body.getHeartbeatReply().getViewEpoch());
    case Op::KV_SET: {
      auto kv = body.getKvSet();
      TouchText(kv.getKey(), limits);
      auto value = kv.getValue();
      return Consume(value.begin(), value.size());
    }
    case Op::KV_GET: {
      auto kv = body.getKvGet();
      TouchText(kv.getKey(), limits);
      return Consume(kv.getWaitMs());
    }
    case Op::KV_VALUE: {
      auto value = body.getKvValue();
      return Consume(value.begin(), value.size());
    }
    case Op::NODE_EVENT: {
      auto e = body.getNodeEvent();
      STRATA_CHECK_LT(static_cast<int>(e.getKind()), 4);  // dead, rejoined, joined, left
      TouchNode(e.getNode(), limits);
      return TouchView(e.getView(), limits);
    }
    case Op::MIGRATE: {  // elastic: a joining server's ask (or its done)
      auto m = body.getMigrate();
      Consume(m.getServers());
      for (uint32_t r : m.getLeft()) Consume(r);
      Consume(m.getDone());
      auto c = m.getCursor();  // a chunk's position
      Consume(c.getTable());
      Consume(c.getRow());
      return Consume(c.getPushIds());
    }
    case Op::MIGRATE_ROWS: {  // elastic: the answer to migrate, or a leaving server's hand-over
      auto rows = body.getMigrateRows();
      for (auto t : rows.getTables()) {
        STRATA_CHECK_LT(static_cast<int>(t.getKind()), 2);
        TouchText(t.getName(), limits);
      }
      for (auto c : rows.getTrainerClocks()) Consume(static_cast<uint64_t>(c.getClock()));
      Consume(rows.getServers());
      for (uint32_t r : rows.getLeft()) Consume(r);
      auto next = rows.getNext();  // a chunk: where the next one starts
      Consume(next.getTable());
      Consume(next.getRow());
      Consume(next.getPushIds());
      return Consume(rows.getRows());
    }
    case Op::STATE_TRANSFER: {  // replication: a copy of a shard
      auto copy = body.getStateTransfer();
      for (auto t : copy.getTables()) {
        STRATA_CHECK_LT(static_cast<int>(t.getKind()), 2);
        TouchText(t.getName(), limits);
      }
      for (auto c : copy.getTrainerClocks()) Consume(static_cast<uint64_t>(c.getClock()));
      return;
    }
    case Op::CLOCK: {  // a trainer finished a clock (elastic BSP: who split its step)
      auto c = body.getClock();
      Consume(static_cast<uint64_t>(c.getClock()));
      Consume(c.getMembers());
      for (uint32_t r : c.getMemberRanks()) Consume(r);
      Consume(c.getServers());
      return;
    }
    case Op::GRAD_NORM: {  // global clipping: a clock's sum of squares
      auto g = body.getGradNorm();
      Consume(static_cast<uint64_t>(g.getClock()));
      Consume(g.getChunks());
      return Consume(static_cast<uint64_t>(g.getSumSquares() > 0));
    }
    case Op::CREATE_TABLE: {
      auto t = body.getCreateTable();
      STRATA_CHECK_LT(static_cast<int>(t.getKind()), 2);
      TouchText(t.getName(), limits);
      Consume(t.getNumel());
      Consume(static_cast<uint64_t>(t.getOptimizer().getKind()));
      for (int64_t g : t.getInit().getShardGlobal()) Consume(static_cast<uint64_t>(g));
      return;
    }
    case Op::PUSH: {
      auto p = body.getPush();
      Consume(p.getTable());
      Consume(static_cast<uint64_t>(p.getClock()));
      return Consume(p.getPushId());
    }
    case Op::PULL: {
      auto p = body.getPull();
      Consume(p.getTable());
      return Consume(static_cast<uint64_t>(p.getClock()));
    }
    case Op::STATS: return TouchText(body.getStats(), limits);
    case Op::SAVE_TABLES: return TouchText(body.getSaveTables(), limits);
    case Op::SPLIT_LEASE: {
      auto l = body.getSplitLease();
      STRATA_CHECK_LT(static_cast<int>(l.getChange()), 3);
      return Consume(static_cast<uint64_t>(l.getUntil()));
    }
    case Op::SPLIT_SCHEDULE:
      for (auto e : body.getSplitSchedule().getEntries()) {
        for (int32_t t : e.getTrainers()) Consume(static_cast<uint64_t>(t));
      }
      return;
    case Op::EMPTY:
    case Op::GET_VIEW:
    case Op::HEARTBEAT:
    case Op::DEREGISTER:
    case Op::SHUTDOWN:
    case Op::ECHO:
    case Op::VALUES:
    case Op::GET_STATS:
    case Op::REPLICA_JOIN:
    case Op::JOIN_COMMIT:
      return;
  }
}

// The envelope, the body and every payload, checking what Decode promises about them.
void TouchMessage(const Message& m, const WireLimits& limits) {
  Consume(static_cast<uint64_t>(m.op()));
  Consume(OpName(m.op()).size());
  Consume(m.request_id());
  Consume(m.is_reply());
  Consume(m.sender());
  Consume(static_cast<uint64_t>(m.shard()));
  Consume(m.origin());
  Consume(m.incarnation());
  Status s = m.status();
  Consume(s.ToString().size());
  STRATA_CHECK_LE(s.message().size(), limits.max_text_bytes);
  // A body comes exactly with the ops that have one, and holds the header's op.
  const Op body_op = m.reader().getBody().which();
  STRATA_CHECK(body_op == m.op() || (!envelope::HasBody(m.op()) && body_op == Op::EMPTY))
      << OpName(m.op()) << " with a body of " << static_cast<unsigned>(body_op);
  TouchBody(m.reader().getBody(), limits);
  STRATA_CHECK_LE(m.num_payloads(), limits.max_payloads);
  for (size_t i = 0; i < m.num_payloads(); ++i) {
    PayloadInfo info = m.payload_info(i);
    STRATA_CHECK(IsValidDType(static_cast<uint32_t>(info.dtype)));
    STRATA_CHECK_LE(info.shape.size(), static_cast<size_t>(limits.max_payload_dims));
    uint64_t bytes = DTypeSize(info.dtype);
    for (int64_t d : info.shape) {
      STRATA_CHECK_GE(d, 0);
      bytes *= static_cast<uint64_t>(d);  // Decode bounded the product: no overflow here
    }
    STRATA_CHECK_EQ(bytes, info.buffer->size());
    STRATA_CHECK_LE(bytes, limits.max_payload_bytes);
    STRATA_CHECK_EQ(info.buffer, &m.payload(i));
    Consume(info.buffer->data(), info.buffer->size());
  }
}

// What the echo handler (cluster/node.cc) does with a request: a reply carrying its payloads back.
// AddPayload STRATA_CHECKs the shapes, so this also holds Decode to its word.
void AnswerLikeEcho(const Message& m, const WireLimits& limits) {
  Message reply = m.MakeReply(1);
  reply.set_op(Op::ECHO);
  for (size_t i = 0; i < m.num_payloads(); ++i) {
    PayloadInfo info = m.payload_info(i);
    reply.AddPayload(info.dtype, info.shape, *info.buffer);
  }
  auto again = Decode(Encode(reply), limits);
  STRATA_CHECK(again.ok()) << "our own echo reply did not decode: " << again.status().ToString();
  TouchMessage(*again, limits);

  Message error = m.MakeErrorReply(1, m.status().ok() ? Status::Internal("fuzz") : m.status());
  Consume(Encode(error)[0].size());
}

// What a receiver (RpcCore::OnReceive) does with one message's frames: decode it in place; on
// failure peek its request id in the frames DecodeInto left, which must be those that came; on
// success read it all, answer it and forward it.
void FuzzMessage(const Frames& frames, const WireLimits& limits) {
  std::optional<uint64_t> peeked;
  if (!frames.empty()) {
    peeked = PeekRequestId(frames[0]);
    if (peeked) STRATA_CHECK_NE(*peeked, 0u);
  }
  Frames in = frames;
  Message decoded;
  if (Status s = DecodeInto(in, limits, &decoded); !s.ok()) {
    STRATA_CHECK_EQ(in.size(), frames.size()) << "a failed decode took frames";
    for (size_t i = 0; i < in.size(); ++i) {
      STRATA_CHECK(in[i].view() == frames[i].view()) << "a failed decode changed frame " << i;
    }
    STRATA_CHECK(in.empty() || PeekRequestId(in[0]) == peeked) << "the peek after a failed decode differs";
    Consume(s.ToString().size());
    return;
  }
  const Message& m = decoded;
  TouchMessage(m, limits);
  TouchBspMoves(m);
  AnswerLikeEcho(m, limits);
  // Forwarding a received message sends its frames on as they came (the envelope aligned): a
  // receiver with the default limits, no tighter than any here, must take it.
  Frames forwarded = Encode(decoded);
  STRATA_CHECK_EQ(forwarded.size(), frames.size());
  auto again = Decode(forwarded, WireLimits{});
  STRATA_CHECK(again.ok()) << "a forwarded message did not decode: " << again.status().ToString();
  TouchMessage(*again, WireLimits{});
}

// A batch as ZmqTransport's receiver takes it: every message it unpacks lies inside it (ASan
// checks the reads) and is fuzzed as a message; packed again, it unpacks to the same frames.
void FuzzBatch(const Buffer& batch, const WireLimits& limits) {
  auto messages = UnpackBatch(batch, kMaxFuzzBatchMessages);
  if (!messages.ok()) {
    STRATA_CHECK(!messages.status().ok());
    Consume(messages.status().ToString().size());
    return;
  }
  STRATA_CHECK(!messages->empty() && messages->size() <= kMaxFuzzBatchMessages);
  BatchWriter writer;
  for (const Frames& frames : *messages) {
    STRATA_CHECK(!frames.empty()) << "an unpacked message without frames";
    for (const Buffer& f : frames) Consume(f.data(), f.size());
    writer.Append(frames);
    FuzzMessage(frames, limits);
  }
  auto again = UnpackBatch(writer.Finish(), kMaxFuzzBatchMessages);
  STRATA_CHECK(again.ok()) << "a batch packed again did not unpack: " << again.status().ToString();
  STRATA_CHECK_EQ(again->size(), messages->size());
  for (size_t m = 0; m < again->size(); ++m) {
    const Frames &a = (*again)[m], &b = (*messages)[m];
    STRATA_CHECK_EQ(a.size(), b.size());
    for (size_t f = 0; f < a.size(); ++f) {
      STRATA_CHECK(a[f].view() == b[f].view()) << "message " << m << " frame " << f << " changed";
    }
  }
}

}  // namespace
}  // namespace strata

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const WireLimits limits = Limits(flags);
  Frames frames = SplitFrames(data + 1, size - 1, flags);
  if ((flags & kBatch) && !frames.empty()) {
    FuzzBatch(frames[0], limits);
  } else {
    FuzzMessage(frames, limits);
  }
  return 0;
}
