// frame_batch.cc: BatchWriter, BatchReader and UnpackBatch.
#include "common/frame_batch.h"

#include <cstring>
#include <string>

namespace strata {
namespace {

constexpr uint32_t kMarker = 0xffffffffu;
constexpr size_t kWord = 8;

static_assert(BatchWriter::kHeaderBytes == 2 * kWord, "the marker word and the count word");

size_t Padded(size_t n) { return (n + kWord - 1) / kWord * kWord; }

void PutWord(std::byte*& out, uint32_t lo, uint32_t hi) {
  std::memcpy(out, &lo, 4);
  std::memcpy(out + 4, &hi, 4);
  out += kWord;
}

}  // namespace

BatchWriter::BatchWriter() {
  bytes_.reserve(4096);
  bytes_.resize(kHeaderBytes);
  std::byte* out = bytes_.data();
  PutWord(out, kMarker, kBatchVersion);
  PutWord(out, 0, 0);  // the message count, written by Finish
}

size_t BatchWriter::BytesOf(const Frames& frames) {
  size_t bytes = kWord;
  for (const Buffer& f : frames) bytes += kWord + Padded(f.size());
  return bytes;
}

void BatchWriter::Append(const Frames& frames) {
  size_t at = bytes_.size();
  bytes_.resize(at + BytesOf(frames));  // zero-fills the padding
  std::byte* out = bytes_.data() + at;
  PutWord(out, static_cast<uint32_t>(frames.size()), 0);
  for (const Buffer& f : frames) {
    const uint64_t n = f.size();
    std::memcpy(out, &n, kWord);
    out += kWord;
    if (n) std::memcpy(out, f.data(), n);
    out += Padded(n);
  }
  ++messages_;
}

Buffer BatchWriter::Finish() {
  std::memcpy(bytes_.data() + kWord, &messages_, sizeof(messages_));
  messages_ = 0;
  // Buffer::Take moves the vector: operator new's storage, aligned for any scalar type.
  Buffer batch = Buffer::Take(std::move(bytes_));
  bytes_.clear();
  return batch;
}

bool IsBatch(const Buffer& frame) {
  if (frame.size() < kWord) return false;
  uint32_t marker, version;
  std::memcpy(&marker, frame.data(), 4);
  std::memcpy(&version, frame.data() + 4, 4);
  return marker == kMarker && version == kBatchVersion;
}

Result<BatchReader> BatchReader::Open(const Buffer& batch_in, size_t max_messages) {
  if (!IsBatch(batch_in)) return Status::Corruption("frame batch: no batch marker");
  BatchReader r;
  r.batch_ = batch_in;
  if (reinterpret_cast<uintptr_t>(r.batch_.data()) % kWord != 0) {
    // Buffer::Copy's storage comes from operator new: aligned for any scalar type.
    r.batch_ = Buffer::Copy(batch_in.data(), batch_in.size());
  }
  const std::byte* const base = r.batch_.data();
  const size_t size = r.batch_.size();
  size_t at = kWord;
  auto read_u32 = [&](const char* what) -> Result<uint32_t> {
    if (size - at < kWord) {
      return Status::Corruption(std::string("frame batch: truncated at byte ") + std::to_string(at) +
                                " (expected " + what + ")");
    }
    uint32_t v;
    std::memcpy(&v, base + at, 4);
    at += kWord;
    return v;
  };
  STRATA_ASSIGN_OR_RETURN(const uint32_t count, read_u32("the message count"));
  if (count == 0) return Status::Corruption("frame batch: no messages");
  if (count > max_messages) {
    return Status::InvalidArgument("frame batch: " + std::to_string(count) + " messages exceed the limit of " +
                                   std::to_string(max_messages));
  }
  // Every message takes at least two words, so a count the size cannot hold is caught here.
  if (count > (size - at) / (2 * kWord)) {
    return Status::Corruption("frame batch: " + std::to_string(count) + " messages cannot fit in " +
                              std::to_string(size) + " bytes");
  }
  r.at_ = at;
  // The walk Next() repeats, checking every bound it will rely on.
  for (uint32_t m = 0; m < count; ++m) {
    STRATA_ASSIGN_OR_RETURN(const uint32_t frames, read_u32("a frame count"));
    if (frames == 0) return Status::Corruption("frame batch: message " + std::to_string(m) + " has no frames");
    if (frames > (size - at) / kWord) {
      return Status::Corruption("frame batch: message " + std::to_string(m) + " announces " +
                                std::to_string(frames) + " frames past the end");
    }
    for (uint32_t f = 0; f < frames; ++f) {
      if (size - at < kWord) return Status::Corruption("frame batch: truncated in message " + std::to_string(m));
      uint64_t n;
      std::memcpy(&n, base + at, kWord);
      at += kWord;
      if (n > size - at || Padded(n) > size - at) {
        return Status::Corruption("frame batch: frame " + std::to_string(f) + " of message " + std::to_string(m) +
                                  " claims " + std::to_string(n) + " bytes, " + std::to_string(size - at) +
                                  " are left");
      }
      at += Padded(n);
    }
  }
  if (at != size) {
    return Status::Corruption("frame batch: " + std::to_string(size - at) + " bytes after the last message");
  }
  r.count_ = count;
  return r;
}

bool BatchReader::Next(Frames* frames) {
  frames->clear();
  if (taken_ == count_) return false;
  ++taken_;
  const std::byte* const base = batch_.data();
  uint32_t n_frames;
  std::memcpy(&n_frames, base + at_, 4);
  at_ += kWord;
  frames->reserve(n_frames);
  for (uint32_t f = 0; f < n_frames; ++f) {
    uint64_t n;
    std::memcpy(&n, base + at_, kWord);
    at_ += kWord;
    frames->emplace_back(base + at_, n, batch_.owner());
    at_ += Padded(n);
  }
  return true;
}

Result<std::vector<Frames>> UnpackBatch(const Buffer& batch, size_t max_messages) {
  STRATA_ASSIGN_OR_RETURN(BatchReader reader, BatchReader::Open(batch, max_messages));
  std::vector<Frames> messages(reader.messages());
  for (Frames& frames : messages) reader.Next(&frames);
  return messages;
}

}  // namespace strata
