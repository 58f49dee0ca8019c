// message_decode.cc: Decode, the validating half of the codec (common/message.h): the header
// and payload descriptors of common/envelope.h, then, for ops with a body, the Cap'n Proto body,
// every field a handler may read checked once here.
#include <kj/exception.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "common/check.h"
#include "common/envelope.h"
#include "common/message.h"
#include "common/message_parts.h"

namespace strata {
namespace {

bool IsKnownOp(Op op) { return !OpName(op).empty(); }

template <typename Enum>
bool EnumBelow(Enum value, uint16_t count) {
  return static_cast<uint16_t>(value) < count;
}

constexpr uint16_t kRoleCount = 4;
constexpr uint16_t kBarrierScopeCount = 3;
constexpr uint16_t kNodeEventKindCount = 4;
constexpr uint16_t kSplitChangeCount = 3;
constexpr uint16_t kTableKindCount = 2;
constexpr uint16_t kOptimizerKindCount = 4;
constexpr uint16_t kInitKindCount = 4;
constexpr uint16_t kConsistencyCount = 3;
constexpr uint16_t kAggregateCount = 2;


// Reads a Text field, which makes Cap'n Proto check its NUL terminator, and bounds its size.
Status CheckText(capnp::Text::Reader text, const char* field, const WireLimits& limits) {
  if (text.size() > limits.max_text_bytes) {
    return Status::InvalidArgument(std::string(field) + ": text of " +
                                   std::to_string(text.size()) + " bytes exceeds the limit");
  }
  return Status::OK();
}

Status CheckNode(wire::NodeInfo::Reader node, const WireLimits& limits) {
  if (!EnumBelow(node.getRole(), kRoleCount)) return Status::InvalidArgument("node.role out of range");
  return CheckText(node.getAddress(), "node.address", limits);
}

Status CheckView(wire::ClusterView::Reader view, const WireLimits& limits) {
  for (auto node : view.getNodes()) STRATA_RETURN_IF_ERROR(CheckNode(node, limits));
  return Status::OK();
}

Status CheckTableSpec(wire::TableSpec::Reader t, const char* where, const WireLimits& limits) {
  if (!EnumBelow(t.getKind(), kTableKindCount) || !EnumBelow(t.getOptimizer().getKind(), kOptimizerKindCount) ||
      !EnumBelow(t.getInit().getKind(), kInitKindCount) || !EnumBelow(t.getConsistency(), kConsistencyCount) ||
      !EnumBelow(t.getAggregate(), kAggregateCount)) {
    return Status::InvalidArgument(std::string(where) + ": an enum field is out of range");
  }
  (void)t.getInit().getShardGlobal();  // a pointer of the wrong kind throws here, not in a handler
  return CheckText(t.getName(), (std::string(where) + ".name").c_str(), limits);
}

// Per-op checks of the body: enums in range, texts terminated and bounded, and every pointer
// field read once, since reading a pointer of the wrong kind throws (totalSize() does not check
// kinds).
Status CheckBody(wire::Envelope::Body::Reader body, const WireLimits& limits) {
  switch (body.which()) {
    case Op::REGISTER: {
      auto r = body.getRegister();
      if (!EnumBelow(r.getRole(), kRoleCount)) return Status::InvalidArgument("register.role out of range");
      STRATA_RETURN_IF_ERROR(CheckText(r.getAddress(), "register.address", limits));
      STRATA_RETURN_IF_ERROR(CheckText(r.getHostname(), "register.hostname", limits));
      return CheckView(r.getView(), limits);
    }
    case Op::REGISTER_REPLY: return CheckView(body.getRegisterReply().getView(), limits);
    case Op::VIEW: return CheckView(body.getView(), limits);
    case Op::BARRIER: {
      auto b = body.getBarrier();
      if (!EnumBelow(b.getScope(), kBarrierScopeCount)) {
        return Status::InvalidArgument("barrier.scope out of range");
      }
      return CheckText(b.getName(), "barrier.name", limits);
    }
    case Op::KV_SET: {
      auto kv = body.getKvSet();
      (void)kv.getValue();  // a pointer of the wrong kind throws here, not in a handler
      return CheckText(kv.getKey(), "kvSet.key", limits);
    }
    case Op::KV_GET: return CheckText(body.getKvGet().getKey(), "kvGet.key", limits);
    case Op::NODE_EVENT: {
      auto e = body.getNodeEvent();
      if (!EnumBelow(e.getKind(), kNodeEventKindCount)) {
        return Status::InvalidArgument("nodeEvent.kind out of range");
      }
      STRATA_RETURN_IF_ERROR(CheckNode(e.getNode(), limits));
      return CheckView(e.getView(), limits);
    }
    case Op::HEARTBEAT_REPLY:
      (void)body.getHeartbeatReply();
      return Status::OK();
    case Op::CREATE_TABLE: return CheckTableSpec(body.getCreateTable(), "createTable", limits);
    case Op::PUSH:
      (void)body.getPush();
      return Status::OK();
    case Op::PULL:
      (void)body.getPull();
      return Status::OK();
    case Op::CLOCK:
      (void)body.getClock().getMemberRanks();  // a list of the wrong element type throws here
      return Status::OK();
    case Op::GRAD_NORM:
      (void)body.getGradNorm();
      return Status::OK();
    case Op::STATS:
      return CheckText(body.getStats(), "stats", limits);
    case Op::SAVE_TABLES:
      return CheckText(body.getSaveTables(), "saveTables", limits);
    case Op::KV_VALUE:
      (void)body.getKvValue();
      return Status::OK();
    case Op::SPLIT_LEASE:
      if (!EnumBelow(body.getSplitLease().getChange(), kSplitChangeCount)) {
        return Status::InvalidArgument("splitLease.change out of range");
      }
      return Status::OK();
    case Op::SPLIT_SCHEDULE:
      for (auto e : body.getSplitSchedule().getEntries()) (void)e.getTrainers();
      return Status::OK();
    case Op::MIGRATE: {
      auto m = body.getMigrate();
      (void)m.getLeft();  // a list of the wrong element type throws here
      (void)m.getCursor().getRow();  // a cursor that is not a struct throws here
      return Status::OK();
    }
    case Op::MIGRATE_ROWS:
    case Op::STATE_TRANSFER: {
      const bool migrate = body.which() == Op::MIGRATE_ROWS;
      auto m = migrate ? body.getMigrateRows() : body.getStateTransfer();
      (void)m.getTrainerClocks();
      (void)m.getLeft();
      (void)m.getNext().getRow();
      for (auto t : m.getTables()) {
        STRATA_RETURN_IF_ERROR(CheckTableSpec(t, migrate ? "migrateRows.tables" : "stateTransfer.tables", limits));
      }
      // The BSP accumulations' lists (ps/bsp_moves.h reads them): the wrong kinds throw here.
      for (auto s : m.getBsp()) {
        (void)s.getClocks();
        (void)s.getKeys();
        (void)s.getPushes();
        (void)s.getLrs();
        (void)s.getStagedBy();
        (void)s.getChunkKeys();
        (void)s.getChunkNext();
      }
      for (auto r : m.getClockMembers()) {
        (void)r.getMembers();
        (void)r.getClocked();
      }
      (void)m.getDeadRanks();
      (void)m.getGradScales();
      return Status::OK();
    }
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
      return Status::OK();
  }
  return Status::InvalidArgument("unknown op " + std::to_string(static_cast<unsigned>(body.which())));
}

// Checks the payload descriptors against their frames and the dims' place in the envelope;
// sizes are computed with overflow checks. `at` is the envelope's first byte after the header,
// `left` the bytes from there to its end; `used` is set to the bytes of descriptors and dims.
Status CheckPayloads(const std::byte* at, size_t left, uint32_t n, const Frames& frames,
                     const WireLimits& limits, size_t* used) {
  if (n != frames.size() - 1) {
    return Status::InvalidArgument("envelope describes " + std::to_string(n) + " payloads but " +
                                   std::to_string(frames.size() - 1) + " frames followed");
  }
  if (n > limits.max_payloads) {
    return Status::InvalidArgument(std::to_string(n) + " payloads exceed the limit of " +
                                   std::to_string(limits.max_payloads));
  }
  const size_t descs = size_t{n} * sizeof(envelope::Desc);
  if (descs > left) return Status::Corruption("envelope too short for its payload descriptors");
  const std::byte* dims = at + descs;
  left -= descs;
  uint64_t next_dim = 0;
  for (uint32_t i = 0; i < n; ++i) {
    auto where = [i] { return "payload " + std::to_string(i) + ": "; };
    envelope::Desc d;
    std::memcpy(&d, at + size_t{i} * sizeof(d), sizeof(d));
    if (!IsValidDType(d.dtype)) {
      return Status::InvalidArgument(where() + "dtype " + std::to_string(d.dtype) +
                                     " out of range");
    }
    if (d.dims > limits.max_payload_dims) {
      return Status::InvalidArgument(where() + std::to_string(d.dims) + " dims exceed the limit");
    }
    if (d.reserved != 0 || d.first_dim != next_dim) {
      return Status::Corruption(where() + "descriptor out of order");
    }
    next_dim += d.dims;
    if (next_dim * sizeof(uint64_t) > left) {
      return Status::Corruption(where() + "dims past the envelope");
    }
    uint64_t bytes = DTypeSize(static_cast<DType>(d.dtype));
    for (uint32_t k = 0; k < d.dims; ++k) {
      uint64_t dim;
      std::memcpy(&dim, dims + (size_t{d.first_dim} + k) * sizeof(uint64_t), sizeof(dim));
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (dim != 0 && bytes > limits.max_payload_bytes / dim)) {
        return Status::InvalidArgument(where() + "shape overflows the payload size limit");
      }
      bytes *= dim;
    }
    if (bytes != d.bytes || bytes != frames[i + 1].size()) {
      return Status::InvalidArgument(where() + "shape and dtype give " + std::to_string(bytes) +
                                     " bytes, envelope says " + std::to_string(d.bytes) +
                                     ", frame holds " + std::to_string(frames[i + 1].size()));
    }
  }
  *used = descs + next_dim * sizeof(uint64_t);
  return Status::OK();
}

// Opens and validates a body of `op`, leaving `in` with a reader for handlers.
Status CheckBodyMessage(Op op, const capnp::word* words, size_t nwords, Message::Incoming* in,
                        const WireLimits& limits) {
  try {
    in->words = kj::arrayPtr(words, nwords);
    capnp::ReaderOptions budget;
    // The budget of validation (handlers get a reader of their own, below): it stops
    // amplification through overlapping pointers before the size check sees it.
    budget.traversalLimitInWords = 4 * nwords + 1024;
    budget.nestingLimit = 16;
    in->reader.emplace(in->words, budget);
    auto env = in->reader->getRoot<wire::Envelope>();
    // Walks every pointer: malformed structure throws here, not in a handler. An encoder never
    // points two pointers at the same bytes or makes a cycle, so a body that reaches more
    // words than it holds is amplification; rejecting it bounds every full read by its size.
    // The schema has no interfaces: a capability pointer would throw when the message is copied.
    const capnp::MessageSize size = env.totalSize();
    if (size.wordCount > in->words.size()) return Status::Corruption("body pointers overlap");
    if (size.capCount != 0) return Status::Corruption("body holds capability pointers");
    if (env.getBody().which() != op) {
      return Status::Corruption("the header says " + std::string(OpName(op)) +
                                " but the body holds " +
                                std::to_string(static_cast<unsigned>(env.getBody().which())));
    }
    STRATA_RETURN_IF_ERROR(CheckBody(env.getBody(), limits));
    // Validation spent much of the reader's traversal budget; handlers get a reader of their
    // own without one (the check above bounds what each read costs), so reading never throws.
    capnp::ReaderOptions unlimited;
    unlimited.traversalLimitInWords = std::numeric_limits<uint64_t>::max();
    unlimited.nestingLimit = 16;
    in->reader.emplace(in->words, unlimited);
    in->root = in->reader->getRoot<wire::Envelope>();
    return Status::OK();
  } catch (const kj::Exception& e) {
    return Status::Corruption(std::string("malformed body: ") + e.getDescription().cStr());
  }
}

// The header of an envelope frame, if it is long enough and starts with the magic.
std::optional<envelope::Header> ReadHeader(const Buffer& frame) {
  envelope::Header h;
  if (frame.size() < sizeof(h)) return std::nullopt;
  std::memcpy(&h, frame.data(), sizeof(h));
  if (h.magic != envelope::kMagic) return std::nullopt;
  return h;
}

// A copy of `frame` in word-aligned storage.
Buffer AlignedCopy(const Buffer& frame) {
  auto storage = std::make_shared<uint64_t[]>(envelope::Words(frame.size()));
  std::memcpy(storage.get(), frame.data(), frame.size());
  const void* p = storage.get();
  return Buffer(p, frame.size(), std::move(storage));
}

}  // namespace

Status DecodeInto(Frames& frames, const WireLimits& limits, Message* out) {
  STRATA_CHECK(out->is_outgoing() && out->frames_.empty() && !out->arena_ && out->error_.empty())
      << "DecodeInto a message that is not empty";
  if (frames.empty()) return Status::Corruption("empty message: no envelope frame");
  if (frames[0].size() > limits.max_envelope_bytes) {
    return Status::InvalidArgument("envelope of " + std::to_string(frames[0].size()) +
                                   " bytes exceeds the limit of " +
                                   std::to_string(limits.max_envelope_bytes));
  }
  const size_t size = frames[0].size();
  if (size % envelope::kWord != 0 || size < sizeof(envelope::Header)) {
    return Status::Corruption("envelope of " + std::to_string(size) +
                              " bytes is not a whole number of 8-byte words of at least " +
                              std::to_string(sizeof(envelope::Header)));
  }
  const std::optional<envelope::Header> h = ReadHeader(frames[0]);
  if (!h) return Status::Corruption("not a strata envelope (bad magic)");
  const auto op = static_cast<Op>(h->op);
  if (!IsKnownOp(op)) return Status::InvalidArgument("unknown op " + std::to_string(h->op));
  if ((h->flags & ~envelope::kReplyFlag) != 0 || h->reserved != 0) {
    return Status::Corruption("envelope header has unknown flags set");
  }
  if (h->status >= kStatusCodeCount) return Status::InvalidArgument("status code out of range");
  if (reinterpret_cast<uintptr_t>(frames[0].data()) % alignof(capnp::word) != 0) {
    frames[0] = AlignedCopy(frames[0]);
  }
  const std::byte* wire = frames[0].data();
  size_t at = sizeof(envelope::Header);
  size_t used = 0;
  STRATA_RETURN_IF_ERROR(CheckPayloads(wire + at, size - at, h->payloads, frames, limits, &used));
  at += envelope::Words(used) * envelope::kWord;  // descriptors and dims are whole words
  if (h->error_bytes > limits.max_text_bytes) {
    return Status::InvalidArgument("errorMessage: text of " + std::to_string(h->error_bytes) +
                                   " bytes exceeds the limit");
  }
  const size_t error_words = envelope::Words(h->error_bytes);
  if (error_words * envelope::kWord > size - at) {
    return Status::Corruption("error text past the envelope");
  }
  const size_t error_at = at;
  at += error_words * envelope::kWord;
  if (uint64_t{h->body_words} * envelope::kWord != size - at) {
    return Status::Corruption("envelope holds " + std::to_string(size - at) +
                              " bytes after its header, the header says a body of " +
                              std::to_string(h->body_words) + " words");
  }
  if (envelope::HasBody(op) != (h->body_words > 0)) {
    return Status::Corruption(std::string(OpName(op)) +
                              (h->body_words ? " carries no body, but one came"
                                             : " needs a body, none came"));
  }
  std::unique_ptr<Message::Incoming> incoming;
  if (h->body_words) {
    incoming = std::make_unique<Message::Incoming>();
    STRATA_RETURN_IF_ERROR(CheckBodyMessage(op, reinterpret_cast<const capnp::word*>(wire + at),
                                            h->body_words, incoming.get(), limits));
  }
  Message& m = *out;
  m.head_.op = op;
  m.head_.reply = (h->flags & envelope::kReplyFlag) != 0;
  m.head_.request_id = h->request_id;
  m.head_.sender = h->sender;
  m.head_.shard = h->shard;
  m.head_.origin = h->origin;
  m.head_.incarnation = h->incarnation;
  m.head_.status = static_cast<StatusCode>(h->status);
  if (h->error_bytes) {
    m.error_.assign(reinterpret_cast<const char*>(wire + error_at), h->error_bytes);
  }
  m.incoming_ = std::move(incoming);
  m.wire_ = wire;
  m.frames_ = std::move(frames);
  return Status::OK();
}

Result<Message> Decode(Frames frames, const WireLimits& limits) {
  Message m;
  STRATA_RETURN_IF_ERROR(DecodeInto(frames, limits, &m));
  return m;
}

std::optional<uint64_t> PeekRequestId(const Buffer& frame) {
  const std::optional<envelope::Header> h = ReadHeader(frame);
  if (!h || (h->flags & envelope::kReplyFlag) || h->request_id == 0) return std::nullopt;
  return h->request_id;
}

}  // namespace strata
