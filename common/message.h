// message.h: Message (a header, an optional Cap'n Proto body, and raw payload frames), and the
// codec between Messages and Frames. Decode validates everything it reads and returns a Status for garbage:
// a decoded Message can be read by handlers without further checks.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstdint>
#include <memory>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/dtype.h"
#include "common/status.h"
#include "common/wire.capnp.h"

namespace strata {

using Op = wire::Envelope::Body::Which;
std::string_view OpName(Op op);

inline constexpr uint32_t kUnassignedNode = 0xffffffffu;
// The most dims an outgoing payload may have.
inline constexpr int kMaxPayloadDims = 8;

// Bounds a decoder enforces; a peer that exceeds them gets an error reply, not a crash.
struct WireLimits {
  size_t max_envelope_bytes = 16u << 20;  // the envelope frame (keys travel as payloads)
  size_t max_payloads = 4096;             // payload frames per message
  uint64_t max_payload_bytes = 4ull << 30;
  int max_payload_dims = kMaxPayloadDims;
  size_t max_text_bytes = 1u << 20;       // any single Text field
};

// A payload as a decoded message describes it.
struct PayloadInfo {
  DType dtype;
  std::vector<int64_t> shape;
  const Buffer* buffer;
};

// One message: a header (op, request id, sender, status, ...), the op's body when it has one (a
// Cap'n Proto wire::Envelope, read and written through reader() and builder()), and payload
// frames. The layout on the wire is common/envelope.h. Outgoing messages are built with the
// setters and builder(); incoming ones come from Decode() and are read-only. Movable, not
// copyable (like the zmq messages it becomes).
//
// An op without a body (echo, values, empty, heartbeat, ...) is set with set_op() and costs no
// Cap'n Proto builder; an op with one is set through builder().getBody().initX(), which also sets
// the op. op() answers either way.
class Message {
 public:
  Message();  // an empty outgoing message (op empty)
  explicit Message(Op op) : Message() { set_op(op); }  // an op without a body
  Message(Message&&) noexcept;
  Message& operator=(Message&&) noexcept;
  ~Message();

  // Words of an outgoing body's first Cap'n Proto segment, allocated with the builder.
  static constexpr size_t kArenaWords = 64;

  // The body (outgoing only): creates the Cap'n Proto builder on first use.
  wire::Envelope::Builder builder();
  // The body: the builder's, the decoded one's, or, for an op without a body, an empty reader
  // (every field its default).
  wire::Envelope::Reader reader() const;

  Op op() const;
  // Sets an op that has no body (STRATA_CHECKs that it has none and that builder() was not used:
  // ops with a body are set by initialising the body).
  void set_op(Op op);

  uint64_t request_id() const { return head_.request_id; }
  bool is_reply() const { return head_.reply; }
  uint32_t sender() const { return head_.sender; }
  // Parameter-server requests: the shard (the key range of a server rank) addressed; -1: the
  // receiver's own rank.
  int32_t shard() const { return head_.shard; }
  // A request a shard's primary forwards to its backup: the node that sent it to the primary;
  // kUnassignedNode when not forwarded.
  uint32_t origin() const { return head_.origin; }
  // What a node says of itself to the scheduler (heartbeat, deregister): its incarnation at its
  // rank; kUnassignedNode when not said.
  uint32_t incarnation() const { return head_.incarnation; }
  // The Status a reply carries (OK for requests and successful replies).
  Status status() const;

  // Setters, outgoing only.
  void set_request_id(uint64_t id) { OutgoingHead("set_request_id()").request_id = id; }
  void set_reply(bool reply) { OutgoingHead("set_reply()").reply = reply; }
  void set_sender(uint32_t sender) { OutgoingHead("set_sender()").sender = sender; }
  void set_shard(int32_t shard) { OutgoingHead("set_shard()").shard = shard; }
  void set_origin(uint32_t origin) { OutgoingHead("set_origin()").origin = origin; }
  void set_incarnation(uint32_t incarnation) {
    OutgoingHead("set_incarnation()").incarnation = incarnation;
  }
  void set_status(const Status& status);

  // Appends a payload frame and its descriptor (outgoing only). STRATA_CHECKs that the
  // buffer holds exactly product(shape) * DTypeSize(dtype) bytes and that the shape has at
  // most kMaxPayloadDims dims.
  void AddPayload(DType dtype, std::span<const int64_t> shape, Buffer buffer);
  void AddPayload(DType dtype, std::initializer_list<int64_t> shape, Buffer buffer) {
    AddPayload(dtype, std::span<const int64_t>(shape.begin(), shape.size()), std::move(buffer));
  }
  // Appends a 1-D u8 payload.
  void AddBytes(Buffer buffer);
  size_t num_payloads() const { return frames_.empty() ? 0 : frames_.size() - 1; }
  const Buffer& payload(size_t i) const { return frames_.at(i + 1); }
  PayloadInfo payload_info(size_t i) const;

  // Builds the reply skeleton for this request (same request id, is_reply set).
  Message MakeReply(uint32_t sender) const;
  // A reply carrying an error Status (op empty).
  Message MakeErrorReply(uint32_t sender, const Status& error) const;

  struct Arena;     // an outgoing body (codec internal)
  struct Incoming;  // a received body (codec internal)
  // The header's fields (codec internal).
  struct Head {
    Op op = Op::EMPTY;  // of a message without a builder
    bool reply = false;
    uint64_t request_id = 0;
    uint32_t sender = kUnassignedNode;
    int32_t shard = -1;
    uint32_t origin = kUnassignedNode;
    uint32_t incarnation = kUnassignedNode;
    StatusCode status = StatusCode::kOk;
  };
  // An outgoing payload's descriptor (codec internal).
  struct OutDesc {
    DType dtype;
    uint8_t dims;
    int64_t shape[kMaxPayloadDims];
  };

 private:
  friend Frames Encode(Message& message);
  friend Frames Encode(Message&& message);
  friend Status DecodeInto(Frames& frames, const WireLimits& limits, Message* out);
  bool is_outgoing() const { return wire_ == nullptr; }
  void CheckOutgoing(const char* what) const;
  Head& OutgoingHead(const char* what);  // CheckOutgoing, then the header to set
  const OutDesc& out_desc(size_t i) const { return i == 0 ? first_desc_ : more_descs_[i - 1]; }
  Buffer EncodeEnvelope() const;

  Head head_;
  std::string error_;                  // status != ok
  std::unique_ptr<Arena> arena_;       // outgoing, once builder() was called
  std::unique_ptr<Incoming> incoming_; // incoming with a body
  const std::byte* wire_ = nullptr;    // incoming: the envelope frame (frames_[0], aligned)
  OutDesc first_desc_{};               // outgoing: payload 0's descriptor
  std::vector<OutDesc> more_descs_;    // outgoing: payload 1's on
  Frames frames_;  // [0]: the envelope (incoming; empty slot while outgoing); payloads
};

// Serialises the envelope into frame 0 and appends the payload frames (no copies of payloads);
// the message is left as it was. A received message is sent again as it came (its envelope
// frame is shared, not rebuilt).
Frames Encode(Message& message);
// The same, consuming the message: its payload frames are moved, not copied. The transports'
// hot path.
Frames Encode(Message&& message);

// Parses and validates frames. Never throws, never crashes on any input.
Result<Message> Decode(Frames frames, const WireLimits& limits = {});
// Decode into `out`, a Message just constructed (what a receiver that keeps the message in a
// place of its own uses: no move of the Message on the way). The frames move into `out` on
// success and are left as they came on failure (their envelope perhaps copied to align it).
Status DecodeInto(Frames& frames, const WireLimits& limits, Message* out);

// Best effort: the request id of an envelope that failed validation, so the error can still be
// answered. nullopt if even that cannot be read, or if it was a reply or one-way message.
std::optional<uint64_t> PeekRequestId(const Buffer& envelope_frame);

}  // namespace strata
