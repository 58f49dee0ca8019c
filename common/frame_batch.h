// frame_batch.h: BatchWriter and UnpackBatch, several small messages (Frames) in one transport
// frame and back, so that a link with many small messages queued pays ZeroMQ's per-message cost
// (a zmq message per frame, its allocation, its trip through ZeroMQ's pipes and I/O thread)
// once per batch instead of once per frame.
// Layout, little-endian; every field and every frame starts 8-byte aligned from the batch's
// start, so an envelope unpacked from an aligned batch is read in place by Cap'n Proto:
//   u32 0xffffffff, u32 kBatchVersion   the marker: no Cap'n Proto envelope starts with it
//                                       (its first word would announce 2^32 segments)
//   u32 messages, u32 0
//   per message: u32 frames, u32 0; per frame: u64 bytes, the bytes, zeros up to a multiple of 8
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"

namespace strata {

inline constexpr uint32_t kBatchVersion = 0x31304253;  // "SB01"

// Builds one batch, a message at a time (copying its frames). A value; not thread-safe.
class BatchWriter {
 public:
  // The bytes of an empty batch (the marker and the message count).
  static constexpr size_t kHeaderBytes = 16;

  BatchWriter();
  // The bytes Append(frames) adds.
  static size_t BytesOf(const Frames& frames);
  void Append(const Frames& frames);
  size_t messages() const { return messages_; }
  size_t bytes() const { return bytes_.size(); }
  // The batch, as one frame (8-byte aligned). The writer is spent: append nothing after.
  Buffer Finish();

 private:
  std::vector<std::byte> bytes_;
  uint32_t messages_ = 0;
};

// Whether a received frame is a batch (starts with the marker). A frame that is not may still
// be garbage: Decode judges it.
bool IsBatch(const Buffer& frame);

// The messages of a batch, each frame a view sharing `batch`'s owner (no copy, unless `batch`
// is not 8-byte aligned: then it is copied once, so that envelopes can be read in place).
// Checks the whole batch before returning anything: Corruption naming what is wrong for a
// truncated or inconsistent one, InvalidArgument for more than `max_messages` messages.
Result<std::vector<Frames>> UnpackBatch(const Buffer& batch, size_t max_messages);

}  // namespace strata
