// frame_batch.h: BatchWriter, and BatchReader and UnpackBatch: several small messages (Frames)
// in one transport frame and back, so that a link with many small messages queued pays ZeroMQ's
// per-message cost (a zmq message per frame, its allocation, its trip through ZeroMQ's pipes and
// I/O thread) once per batch instead of once per frame.
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

// Reads a batch a message at a time. Open() checks the whole batch first, so that a truncated
// or inconsistent one yields nothing at all (Corruption naming what is wrong; InvalidArgument
// for more than `max_messages` messages); Next() then gives each message's frames, views
// sharing the batch's owner (no copy, unless the batch is not 8-byte aligned: then it is copied
// once, so that envelopes can be read in place). A message at a time, so that a receiver that
// frees each message before taking the next reuses the same memory for every message's frame
// list: a batch unpacked whole allocated hundreds of lists before freeing any, which the
// allocator's per-thread cache cannot hold.
class BatchReader {
 public:
  static Result<BatchReader> Open(const Buffer& batch, size_t max_messages);

  size_t messages() const { return count_; }
  // The next message's frames, into `frames` (cleared first); false after the last.
  bool Next(Frames* frames);

 private:
  BatchReader() = default;

  Buffer batch_;
  size_t count_ = 0;
  size_t taken_ = 0;
  size_t at_ = 0;  // the next message's first byte
};

// The messages of a batch at once (BatchReader's checks and views).
Result<std::vector<Frames>> UnpackBatch(const Buffer& batch, size_t max_messages);

}  // namespace strata
