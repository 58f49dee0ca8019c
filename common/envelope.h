// envelope.h: the layout of a message's first frame, the envelope. Internal to the codec
// (message.cc, message_decode.cc) and to the tools that write frames by hand (the fuzz corpus).
//
// The envelope is a fixed binary header, the payloads' descriptors, the error text, and, only
// for ops that carry one, the op's body as a Cap'n Proto message. Messages without a body (acks,
// pulled values, echoes, heartbeats) never touch Cap'n Proto, which is most of a busy server's
// replies: a header read costs a few loads, a Cap'n Proto envelope a reader, a traversal and
// several allocations (docs/performance.md, "Small messages").
//
// Little-endian, every part a whole number of 8-byte words, so a frame that is 8-byte aligned
// (as frame batches keep them, common/frame_batch.h) is read in place:
//   header, 48 bytes:
//     u32 magic (kEnvelopeMagic)   u16 op (wire::Envelope::Body::Which)   u16 flags (bit 0: reply)
//     u64 request id (0: one-way)
//     u32 sender   i32 shard   u32 origin   u32 incarnation
//     u16 status   u16 0   u32 payloads
//     u32 error bytes   u32 body words
//   per payload, 16 bytes: u8 dtype, u8 dims, u16 0, u32 its first dim's index, u64 bytes
//   every payload's dims, u64 each, in payload order
//   the error text (status != ok), zero-padded to a whole word
//   the body, `body words` long: segment table and segments of a Cap'n Proto message whose root
//     is a wire::Envelope with the op's member of `body` set (present exactly when the op has one)
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "common/wire.capnp.h"

namespace strata::envelope {

static_assert(std::endian::native == std::endian::little, "the envelope is little-endian");

inline constexpr uint32_t kMagic = 0x31304553;  // "SE01"; no frame batch starts with it
inline constexpr uint16_t kReplyFlag = 1;

struct Header {
  uint32_t magic;
  uint16_t op;
  uint16_t flags;
  uint64_t request_id;
  uint32_t sender;
  int32_t shard;
  uint32_t origin;
  uint32_t incarnation;
  uint16_t status;
  uint16_t reserved;
  uint32_t payloads;
  uint32_t error_bytes;
  uint32_t body_words;
};
static_assert(sizeof(Header) == 48);

struct Desc {
  uint8_t dtype;
  uint8_t dims;
  uint16_t reserved;
  uint32_t first_dim;
  uint64_t bytes;
};
static_assert(sizeof(Desc) == 16);

inline constexpr size_t kWord = 8;
inline constexpr size_t Words(size_t bytes) { return (bytes + kWord - 1) / kWord; }

// Whether messages of `op` carry a body (a struct, list, text or data member of the union).
// The others are Void members: their op alone says everything.
constexpr bool HasBody(wire::Envelope::Body::Which op) {
  using Op = wire::Envelope::Body::Which;
  switch (op) {
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
      return false;
    default:
      return true;
  }
}

}  // namespace strata::envelope
