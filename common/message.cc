// message.cc: Message construction and the validating codec between Messages and Frames.
#include "common/message.h"

#include <kj/exception.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "common/check.h"

namespace strata {

// ---------------------------------------------------------------------------------------------
// Ops

std::string_view OpName(Op op) {
  switch (op) {
    case Op::EMPTY: return "empty";
    case Op::REGISTER: return "register";
    case Op::REGISTER_REPLY: return "registerReply";
    case Op::GET_VIEW: return "getView";
    case Op::VIEW: return "view";
    case Op::BARRIER: return "barrier";
    case Op::HEARTBEAT: return "heartbeat";
    case Op::HEARTBEAT_REPLY: return "heartbeatReply";
    case Op::KV_SET: return "kvSet";
    case Op::KV_GET: return "kvGet";
    case Op::KV_VALUE: return "kvValue";
    case Op::NODE_EVENT: return "nodeEvent";
    case Op::DEREGISTER: return "deregister";
    case Op::SHUTDOWN: return "shutdown";
    case Op::ECHO: return "echo";
    case Op::CREATE_TABLE: return "createTable";
    case Op::PUSH: return "push";
    case Op::PULL: return "pull";
    case Op::VALUES: return "values";
    case Op::CLOCK: return "clock";
    case Op::GET_STATS: return "getStats";
    case Op::STATS: return "stats";
    case Op::SAVE_TABLES: return "saveTables";
    case Op::SPLIT_LEASE: return "splitLease";
    case Op::SPLIT_SCHEDULE: return "splitSchedule";
    case Op::MIGRATE: return "migrate";
    case Op::MIGRATE_ROWS: return "migrateRows";
    case Op::REPLICA_JOIN: return "replicaJoin";
    case Op::STATE_TRANSFER: return "stateTransfer";
    case Op::GRAD_NORM: return "gradNorm";
    case Op::JOIN_COMMIT: return "joinCommit";
  }
  return {};  // unknown: IsKnownOp relies on this being empty
}

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

}  // namespace

// ---------------------------------------------------------------------------------------------
// Message

struct Message::Arena {
  // The first segment, zeroed as MallocMessageBuilder requires of one it is given (it zeroes
  // what it used again when destroyed). Word 0 is not the builder's: Encode writes the segment
  // table there, in front of the segment, so that the two are one contiguous frame.
  alignas(capnp::word) uint64_t words[kArenaWords] = {};
  capnp::MallocMessageBuilder builder{
      kj::arrayPtr(reinterpret_cast<capnp::word*>(words) + 1, kArenaWords - 1)};
  // The root, found once: a builder (or reader) points at the root struct, which never moves,
  // and looking it up again costs a bounds-checked pointer read every time.
  wire::Envelope::Builder root = builder.initRoot<wire::Envelope>();
};

struct Message::Incoming {
  kj::Array<capnp::word> copy;    // used when the frame was not word-aligned
  kj::ArrayPtr<const capnp::word> words;  // the envelope, in the frame or in `copy`
  std::optional<capnp::FlatArrayMessageReader> reader;
  wire::Envelope::Reader root;  // of `reader`, once validated (see Arena::root)
};

Message::Message() : arena_(std::make_shared<Arena>()) {}
Message::Message(std::unique_ptr<Incoming> incoming, Frames frames)
    : incoming_(std::move(incoming)), frames_(std::move(frames)) {}
Message::Message(Message&&) noexcept = default;
Message& Message::operator=(Message&&) noexcept = default;
Message::~Message() = default;

wire::Envelope::Builder Message::builder() {
  STRATA_CHECK(arena_ != nullptr) << "builder() on a received (or encoded) message";
  return arena_->root;
}

wire::Envelope::Reader Message::reader() const {
  if (arena_) return arena_->root.asReader();
  return incoming_->root;
}

Status Message::status() const {
  auto env = reader();
  auto code = static_cast<StatusCode>(env.getStatus());
  if (code == StatusCode::kOk) return Status::OK();
  return Status(code, std::string(env.getErrorMessage().cStr()));
}

void Message::AddPayload(DType dtype, std::span<const int64_t> shape, Buffer buffer) {
  uint64_t numel = 1;
  for (int64_t d : shape) {
    STRATA_CHECK_GE(d, 0);
    numel *= static_cast<uint64_t>(d);
  }
  STRATA_CHECK_EQ(numel * DTypeSize(dtype), buffer.size()) << "payload bytes do not match shape";
  auto env = builder();
  const size_t n = num_payloads();
  wire::PayloadDesc::Builder desc = nullptr;
  if (n == 0) {
    desc = env.initPayloads(1)[0];  // most messages carry one payload: no list to rebuild
  } else {
    // Cap'n Proto lists cannot grow: rebuild the descriptor list one longer.
    auto old = env.getPayloads().asReader();
    auto orphan = arena_->builder.getOrphanage().newOrphan<capnp::List<wire::PayloadDesc>>(old.size() + 1);
    auto list = orphan.get();
    for (unsigned i = 0; i < old.size(); ++i) list.setWithCaveats(i, old[i]);
    env.adoptPayloads(std::move(orphan));
    desc = env.getPayloads()[static_cast<unsigned>(n)];
  }
  desc.setDtype(static_cast<wire::DType>(dtype));
  auto dims = desc.initShape(static_cast<unsigned>(shape.size()));
  for (unsigned i = 0; i < shape.size(); ++i) dims.set(i, static_cast<uint64_t>(shape[i]));
  desc.setByteSize(buffer.size());
  if (frames_.empty()) {
    frames_.reserve(2);
    frames_.emplace_back();  // the envelope's slot
  }
  frames_.push_back(std::move(buffer));
}

void Message::AddBytes(Buffer buffer) {
  const auto n = static_cast<int64_t>(buffer.size());
  AddPayload(DType::kU8, {n}, std::move(buffer));
}

PayloadInfo Message::payload_info(size_t i) const {
  auto desc = reader().getPayloads()[static_cast<unsigned>(i)];
  PayloadInfo info{static_cast<DType>(desc.getDtype()), {}, &frames_.at(i + 1)};
  for (uint64_t d : desc.getShape()) info.shape.push_back(static_cast<int64_t>(d));
  return info;
}

Message Message::MakeReply(uint32_t sender) const {
  Message reply;
  auto b = reply.builder();
  b.setRequestId(request_id());
  b.setIsReply(true);
  b.setSender(sender);
  return reply;
}

Message Message::MakeErrorReply(uint32_t sender, const Status& error) const {
  Message reply = MakeReply(sender);
  auto b = reply.builder();
  b.setStatus(static_cast<wire::StatusCode>(error.code()));
  b.setErrorMessage(error.message());
  return reply;
}

// ---------------------------------------------------------------------------------------------
// Encode

namespace {

Buffer FlatEnvelope(capnp::MessageBuilder& builder) {
  auto owned = std::make_shared<kj::Array<capnp::word>>(capnp::messageToFlatArray(builder));
  return Buffer(owned->begin(), owned->size() * sizeof(capnp::word), owned);
}

Buffer CopyEnvelope(const Message& message) {
  capnp::MallocMessageBuilder copy;
  copy.setRoot(message.reader());
  return FlatEnvelope(copy);
}

}  // namespace

Frames Encode(Message& message) {
  Frames frames;
  frames.reserve(std::max<size_t>(1, message.frames_.size()));
  frames.push_back(message.arena_ ? FlatEnvelope(message.arena_->builder) : CopyEnvelope(message));
  for (size_t i = 1; i < message.frames_.size(); ++i) frames.push_back(message.frames_[i]);
  return frames;
}

Frames Encode(Message&& message) {
  if (!message.arena_) return Encode(message);  // re-sending a received message
  Message::Arena& arena = *message.arena_;
  auto segments = arena.builder.getSegmentsForOutput();
  const auto* first = reinterpret_cast<const capnp::word*>(arena.words) + 1;
  Buffer envelope;
  if (segments.size() == 1 && segments[0].begin() == first) {
    // The flat-array form of a one-segment message: (segments - 1, words) then the segment.
    const auto words = static_cast<uint32_t>(segments[0].size());
    arena.words[0] = uint64_t{words} << 32;  // little-endian: u32 0, then u32 words
    envelope = Buffer(arena.words, (1 + words) * sizeof(capnp::word), std::move(message.arena_));
  } else {
    envelope = FlatEnvelope(arena.builder);
    message.arena_.reset();
  }
  Frames frames = std::move(message.frames_);
  if (frames.empty()) frames.emplace_back();
  frames[0] = std::move(envelope);
  return frames;
}

// ---------------------------------------------------------------------------------------------
// Decode

namespace {

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

// Checks every payload descriptor against its frame; sizes are computed with overflow checks.
Status CheckPayloads(capnp::List<wire::PayloadDesc>::Reader descs, const Frames& frames,
                     const WireLimits& limits) {
  const size_t n = frames.size() - 1;
  if (descs.size() != n) {
    return Status::InvalidArgument("envelope describes " + std::to_string(descs.size()) +
                                   " payloads but " + std::to_string(n) + " frames followed");
  }
  if (n > limits.max_payloads) {
    return Status::InvalidArgument(std::to_string(n) + " payloads exceed the limit of " +
                                   std::to_string(limits.max_payloads));
  }
  for (unsigned i = 0; i < n; ++i) {
    auto d = descs[i];
    auto where = [i] { return "payload " + std::to_string(i) + ": "; };
    auto raw_dtype = static_cast<uint16_t>(d.getDtype());
    if (!IsValidDType(raw_dtype)) {
      return Status::InvalidArgument(where() + "dtype " + std::to_string(raw_dtype) + " out of range");
    }
    auto shape = d.getShape();
    if (shape.size() > static_cast<unsigned>(limits.max_payload_dims)) {
      return Status::InvalidArgument(where() + std::to_string(shape.size()) + " dims exceed the limit");
    }
    uint64_t bytes = DTypeSize(static_cast<DType>(raw_dtype));
    for (uint64_t dim : shape) {
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (dim != 0 && bytes > limits.max_payload_bytes / dim)) {
        return Status::InvalidArgument(where() + "shape overflows the payload size limit");
      }
      bytes *= dim;
    }
    if (bytes != d.getByteSize() || bytes != frames[i + 1].size()) {
      return Status::InvalidArgument(where() + "shape and dtype give " + std::to_string(bytes) +
                                     " bytes, envelope says " + std::to_string(d.getByteSize()) +
                                     ", frame holds " + std::to_string(frames[i + 1].size()));
    }
  }
  return Status::OK();
}

// Opens the envelope frame as a Cap'n Proto reader (in place when word-aligned).
std::unique_ptr<Message::Incoming> OpenEnvelope(const Buffer& frame, const WireLimits& limits) {
  auto in = std::make_unique<Message::Incoming>();
  const size_t nwords = frame.size() / sizeof(capnp::word);
  kj::ArrayPtr<const capnp::word> words;
  if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(capnp::word) == 0) {
    words = kj::arrayPtr(reinterpret_cast<const capnp::word*>(frame.data()), nwords);
  } else {
    in->copy = kj::heapArray<capnp::word>(nwords);
    std::memcpy(in->copy.begin(), frame.data(), nwords * sizeof(capnp::word));
    words = in->copy.asPtr();
  }
  in->words = words;
  capnp::ReaderOptions options;
  // The budget of validation (Decode gives handlers a reader of their own): it stops
  // amplification through overlapping pointers before Decode's size check sees it.
  options.traversalLimitInWords = 4 * nwords + 1024;
  options.nestingLimit = 16;
  (void)limits;
  in->reader.emplace(words, options);
  return in;
}

}  // namespace

Result<Message> Decode(Frames frames, const WireLimits& limits) {
  if (frames.empty()) return Status::Corruption("empty message: no envelope frame");
  const Buffer& env_frame = frames[0];
  if (env_frame.size() % sizeof(capnp::word) != 0 || env_frame.size() < sizeof(capnp::word)) {
    return Status::Corruption("envelope of " + std::to_string(env_frame.size()) +
                              " bytes is not a whole number of 8-byte words");
  }
  if (env_frame.size() > limits.max_envelope_bytes) {
    return Status::InvalidArgument("envelope of " + std::to_string(env_frame.size()) +
                                   " bytes exceeds the limit of " +
                                   std::to_string(limits.max_envelope_bytes));
  }
  try {
    auto incoming = OpenEnvelope(env_frame, limits);
    auto env = incoming->reader->getRoot<wire::Envelope>();
    // Walks every pointer: malformed structure throws here, not in a handler. An encoder never
    // points two pointers at the same bytes or makes a cycle, so an envelope that reaches more
    // words than it holds is amplification; rejecting it bounds every full read by its size.
    // The schema has no interfaces: a capability pointer would throw when the message is copied.
    const capnp::MessageSize size = env.totalSize();
    if (size.wordCount > incoming->words.size()) {
      return Status::Corruption("envelope pointers overlap");
    }
    if (size.capCount != 0) return Status::Corruption("envelope holds capability pointers");
    if (!IsKnownOp(env.getBody().which())) {
      return Status::InvalidArgument(
          "unknown op " + std::to_string(static_cast<unsigned>(env.getBody().which())));
    }
    if (!EnumBelow(env.getStatus(), kStatusCodeCount)) {
      return Status::InvalidArgument("status code out of range");
    }
    STRATA_RETURN_IF_ERROR(CheckText(env.getErrorMessage(), "errorMessage", limits));
    STRATA_RETURN_IF_ERROR(CheckBody(env.getBody(), limits));
    STRATA_RETURN_IF_ERROR(CheckPayloads(env.getPayloads(), frames, limits));
    // Validation spent much of the reader's traversal budget; handlers get a reader of their own
    // without one (the check above bounds what each read costs), so reading never throws.
    capnp::ReaderOptions unlimited;
    unlimited.traversalLimitInWords = std::numeric_limits<uint64_t>::max();
    unlimited.nestingLimit = 16;
    incoming->reader.emplace(incoming->words, unlimited);
    incoming->root = incoming->reader->getRoot<wire::Envelope>();
    return Message(std::move(incoming), std::move(frames));
  } catch (const kj::Exception& e) {
    return Status::Corruption(std::string("malformed envelope: ") + e.getDescription().cStr());
  }
}

std::optional<uint64_t> PeekRequestId(const Buffer& frame) {
  if (frame.size() % sizeof(capnp::word) != 0 || frame.size() < sizeof(capnp::word)) {
    return std::nullopt;
  }
  try {
    auto incoming = OpenEnvelope(frame, WireLimits{});
    auto env = incoming->reader->getRoot<wire::Envelope>();
    if (env.getIsReply() || env.getRequestId() == 0) return std::nullopt;
    return env.getRequestId();
  } catch (const kj::Exception&) {
    return std::nullopt;
  }
}

}  // namespace strata
