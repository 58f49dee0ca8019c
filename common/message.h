// message.h: Message (a Cap'n Proto envelope plus raw payload frames), and the codec between
// Messages and Frames. Decode validates everything it reads and returns a Status for garbage:
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

// Bounds a decoder enforces; a peer that exceeds them gets an error reply, not a crash.
struct WireLimits {
  size_t max_envelope_bytes = 16u << 20;  // Cap'n Proto part (keys travel as payloads)
  size_t max_payloads = 4096;             // payload frames per message
  uint64_t max_payload_bytes = 4ull << 30;
  int max_payload_dims = 8;
  size_t max_text_bytes = 1u << 20;       // any single Text field
};

// A payload as a decoded message describes it.
struct PayloadInfo {
  DType dtype;
  std::vector<int64_t> shape;
  const Buffer* buffer;
};

// One message. Outgoing messages are built with builder(); incoming ones come from Decode()
// and are read with reader(). Movable, not copyable (like the zmq messages it becomes).
// An outgoing message is built in one allocation (its Arena: a Cap'n Proto builder whose first
// segment, kArenaWords words, sits beside it); Encode(std::move(m)) hands that segment out as
// the envelope frame without copying it when the envelope fits.
class Message {
 public:
  Message();  // an empty outgoing message (body = empty)
  Message(Message&&) noexcept;
  Message& operator=(Message&&) noexcept;
  ~Message();

  // Words of an outgoing message's first segment, one of them the segment table.
  static constexpr size_t kArenaWords = 64;

  bool is_outgoing() const { return arena_ != nullptr; }
  wire::Envelope::Builder builder();  // outgoing only
  wire::Envelope::Reader reader() const;

  Op op() const { return reader().getBody().which(); }
  uint64_t request_id() const { return reader().getRequestId(); }
  bool is_reply() const { return reader().getIsReply(); }
  uint32_t sender() const { return reader().getSender(); }
  // The Status a reply carries (OK for requests and successful replies).
  Status status() const;

  // Appends a payload frame and its descriptor (outgoing only). STRATA_CHECKs that the
  // buffer holds exactly product(shape) * DTypeSize(dtype) bytes.
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
  // A reply carrying an error Status (body empty).
  Message MakeErrorReply(uint32_t sender, const Status& error) const;

  struct Arena;     // an outgoing envelope (codec internal)
  struct Incoming;  // a received envelope (codec internal)

 private:
  friend Frames Encode(Message& message);
  friend Frames Encode(Message&& message);
  friend Result<Message> Decode(Frames frames, const WireLimits& limits);
  Message(std::unique_ptr<Incoming> incoming, Frames frames);

  std::shared_ptr<Arena> arena_;
  std::unique_ptr<Incoming> incoming_;
  Frames frames_;  // [0]: the envelope (empty until encoded, for an outgoing message); payloads
};

// Serialises the envelope into frame 0 and appends the payload frames (no copies of payloads);
// the message is left as it was.
Frames Encode(Message& message);
// The same, consuming the message: its envelope frame is the builder's own segment (no copy)
// when the envelope fits in it, and its payload frames are moved, not copied. The transports'
// hot path.
Frames Encode(Message&& message);

// Parses and validates frames. Never throws, never crashes on any input.
Result<Message> Decode(Frames frames, const WireLimits& limits = {});

// Best effort: the request id of an envelope that failed validation, so the error can still be
// answered. nullopt if even that cannot be read, or if it was a reply or one-way message.
std::optional<uint64_t> PeekRequestId(const Buffer& envelope_frame);

}  // namespace strata
