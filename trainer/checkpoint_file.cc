// checkpoint_file.cc: WriteShardFile and ShardFile (the index and per-tensor reads).
#include "trainer/checkpoint_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/checksum.h"
#include "common/file.h"
#include "trainer/models/model.h"

namespace strata {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'S', 'H'};
constexpr char kOldMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'C', 'K'};  // format 1 and 2
constexpr uint64_t kHeaderBytes = 32;
constexpr uint64_t kAlign = 64;
constexpr uint32_t kMaxName = 4096;
constexpr uint32_t kMaxRank = 8;
constexpr uint64_t kMaxIndex = uint64_t{1} << 30;

uint64_t AlignUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Appends fixed-size values to a byte string (the index).
class Encoder {
 public:
  template <class T>
  void Put(T v) { out_.append(reinterpret_cast<const char*>(&v), sizeof(v)); }
  void PutRaw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  void PutString(const std::string& s) {
    Put(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};

// Reads them back with bounds checks.
class Decoder {
 public:
  explicit Decoder(const std::string& in) : in_(in) {}
  template <class T>
  bool Get(T& v) {
    if (in_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetString(std::string& s, uint32_t max) {
    uint32_t n = 0;
    if (!Get(n) || n > max || in_.size() - pos_ < n) return false;
    s.assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

std::string EncodeIndex(const std::string& meta, const std::vector<TensorEntry>& entries) {
  Encoder e;
  e.PutString(meta);
  e.Put(static_cast<uint32_t>(entries.size()));
  for (const TensorEntry& t : entries) {
    e.PutString(t.name);
    e.Put(static_cast<uint32_t>(t.spec.global.size()));
    for (int64_t d : t.spec.global) e.Put(d);
    e.Put<int32_t>(t.spec.axis);
    e.Put<int32_t>(t.spec.blocks);
    e.Put<int32_t>(t.spec.index);
    e.Put<int32_t>(t.spec.parts);
    e.Put(t.offset);
    e.Put(t.bytes);
    e.Put(t.checksum);
  }
  return e.bytes();
}

}  // namespace

Status SyncPath(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return ErrnoStatus("cannot open to sync", path, errno);
  const int r = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  return r == 0 ? Status::OK() : ErrnoStatus("cannot fsync", path, err);
}

Status DurableRename(const std::string& from, const std::string& to, const std::string& dir) {
  STRATA_RETURN_IF_ERROR(SyncPath(from, false));
  std::error_code ec;
  std::filesystem::rename(from, to, ec);
  if (ec) return Status::IOError("cannot rename " + from + " to " + to + ": " + ec.message());
  return SyncPath(dir, true);
}

Result<FileDigest> WriteShardFile(const std::string& path, const std::string& meta,
                                  const std::vector<ShardTensor>& tensors) {
  // Host copies first: the checksums go into the index, which precedes the data.
  std::vector<Tensor> host;
  std::vector<TensorEntry> entries;
  for (const ShardTensor& t : tensors) {
    STRATA_RETURN_IF_ERROR(t.spec.Validate(t.name));
    if (t.value.dtype() != DType::kF32 || t.value.shape() != t.spec.LocalShape()) {
      return Status::InvalidArgument(t.name + ": local tensor " + ShapeToString(t.value.shape()) +
                                     " is not the f32 shard " + ShapeToString(t.spec.LocalShape()) +
                                     " of " + t.spec.ToString());
    }
    host.push_back(ToHost(t.value));
    entries.push_back({t.name, t.spec, 0, host.back().nbytes(), Checksum64(host.back().data(), host.back().nbytes())});
  }
  // The index's size does not depend on the offsets, so encode once to place the data.
  uint64_t offset = AlignUp(kHeaderBytes + EncodeIndex(meta, entries).size());
  for (TensorEntry& e : entries) {
    e.offset = offset;
    offset = AlignUp(offset + e.bytes);
  }
  const std::string index = EncodeIndex(meta, entries);

  const std::filesystem::path final_path(path);
  const std::string dir = final_path.parent_path().string();
  const std::string tmp = path + ".tmp";
  Checksum64Stream whole;
  uint64_t written = 0;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return ErrnoStatus("cannot create", tmp, errno);
    auto write = [&](const void* p, uint64_t n) {
      whole.Update(p, n);
      out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
      written += n;
    };
    const std::string zeros(kAlign, '\0');
    auto pad_to = [&](uint64_t at) { write(zeros.data(), at - written); };
    Encoder header;
    header.PutRaw(kMagic, sizeof(kMagic));
    header.Put(kCheckpointFormat);
    header.Put<uint32_t>(0);
    header.Put<uint64_t>(index.size());
    header.Put(Checksum64(index.data(), index.size()));
    write(header.bytes().data(), header.bytes().size());
    write(index.data(), index.size());
    for (size_t i = 0; i < entries.size(); ++i) {
      pad_to(entries[i].offset);
      write(host[i].data(), entries[i].bytes);
    }
    pad_to(AlignUp(written));
    out.flush();
    if (!out) return Status::IOError("writing " + tmp + " failed (disk full?)");
  }
  STRATA_RETURN_IF_ERROR(DurableRename(tmp, path, dir.empty() ? "." : dir));
  return FileDigest{written, whole.Digest()};
}

Result<ShardFile> ShardFile::Open(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open checkpoint file " + path);
  auto bad = [&](const std::string& what) { return Status::Corruption(path + ": " + what); };
  ShardFile f;
  f.path_ = path;
  std::error_code ec;
  f.size_ = std::filesystem::file_size(path, ec);
  if (ec) return Status::IOError("cannot stat " + path + ": " + ec.message());
  char magic[8];
  uint32_t version = 0, zero = 0;
  uint64_t index_bytes = 0, index_sum = 0;
  if (!in.read(magic, 8)) return bad("truncated (" + std::to_string(f.size_) + " bytes, no header)");
  if (std::memcmp(magic, kOldMagic, 8) == 0) {
    return Status::FailedPrecondition(
        path + ": a per-rank checkpoint file of format 1 or 2 (one parallel layout); this strata "
               "reads format-3 checkpoint directories (step-<N>/manifest.json): resume it with "
               "the strata that wrote it, or start afresh");
  }
  if (std::memcmp(magic, kMagic, 8) != 0) return bad("not a strata checkpoint shard file");
  if (!in.read(reinterpret_cast<char*>(&version), 4)) return bad("truncated header");
  if (version != kCheckpointFormat) {
    return Status::FailedPrecondition(path + ": checkpoint format version " + std::to_string(version) +
                                      "; this strata reads version " + std::to_string(kCheckpointFormat));
  }
  if (!in.read(reinterpret_cast<char*>(&zero), 4) || !in.read(reinterpret_cast<char*>(&index_bytes), 8) ||
      !in.read(reinterpret_cast<char*>(&index_sum), 8)) {
    return bad("truncated header");
  }
  if (index_bytes > kMaxIndex || kHeaderBytes + index_bytes > f.size_) {
    return bad("truncated: the index needs " + std::to_string(index_bytes) + " bytes, the file has " +
               std::to_string(f.size_));
  }
  std::string index(index_bytes, '\0');
  if (!in.read(index.data(), static_cast<std::streamsize>(index_bytes))) return bad("truncated index");
  if (Checksum64(index.data(), index.size()) != index_sum) return bad("index checksum mismatch");
  Decoder d(index);
  uint32_t count = 0;
  if (!d.GetString(f.meta_, 1 << 24) || !d.Get(count)) return bad("bad index");
  for (uint32_t i = 0; i < count; ++i) {
    TensorEntry e;
    uint32_t rank = 0;
    if (!d.GetString(e.name, kMaxName) || !d.Get(rank) || rank > kMaxRank) return bad("bad index entry " + std::to_string(i));
    e.spec.global.resize(rank);
    for (int64_t& dim : e.spec.global) {
      if (!d.Get(dim) || dim < 0) return bad("bad shape of " + e.name);
    }
    int32_t axis = 0, blocks = 0, index_in = 0, parts = 0;
    if (!d.Get(axis) || !d.Get(blocks) || !d.Get(index_in) || !d.Get(parts) || !d.Get(e.offset) ||
        !d.Get(e.bytes) || !d.Get(e.checksum)) {
      return bad("bad index entry of " + e.name);
    }
    e.spec.axis = axis;
    e.spec.blocks = blocks;
    e.spec.index = index_in;
    e.spec.parts = parts;
    if (Status s = e.spec.Validate(path + ": " + e.name); !s.ok()) return Status::Corruption(s.message());
    auto numel = ShapeNumel(e.spec.LocalShape());
    if (!numel.ok() || static_cast<uint64_t>(*numel) * 4 != e.bytes) {
      return bad(e.name + ": " + std::to_string(e.bytes) + " data bytes for a shard of shape " +
                 ShapeToString(e.spec.LocalShape()));
    }
    if (e.offset > f.size_ || e.bytes > f.size_ - e.offset) {
      return bad("truncated: " + e.name + " ends at byte " + std::to_string(e.offset + e.bytes) +
                 ", the file has " + std::to_string(f.size_));
    }
    f.entries_.push_back(std::move(e));
  }
  if (!d.done()) return bad("trailing bytes in the index");
  return f;
}

Status ShardFile::Read(const TensorEntry& e, float* out) const {
  std::ifstream in(path_, std::ios::binary);
  if (!in) return Status::NotFound("cannot open checkpoint file " + path_);
  in.seekg(static_cast<std::streamoff>(e.offset));
  if (!in.read(reinterpret_cast<char*>(out), static_cast<std::streamsize>(e.bytes))) {
    return Status::Corruption(path_ + ": truncated values of " + e.name);
  }
  if (Checksum64(out, e.bytes) != e.checksum) {
    return Status::Corruption(path_ + ": checksum mismatch in the values of " + e.name);
  }
  return Status::OK();
}

Result<FileDigest> ShardFile::Digest() const {
  std::ifstream in(path_, std::ios::binary);
  if (!in) return Status::NotFound("cannot open checkpoint file " + path_);
  Checksum64Stream sum;
  FileDigest d;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<uint64_t>(in.gcount());
    sum.Update(buf.data(), n);
    d.bytes += n;
  }
  d.checksum = sum.Digest();
  return d;
}

}  // namespace strata
