// checkpoint.cc: WriteCheckpoint, ReadCheckpoint.
#include "trainer/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/checksum.h"
#include "common/file.h"
#include "trainer/models/model.h"
#include "trainer/ops/exec.h"

namespace strata {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'C', 'K'};
// 1: FNV-1a checksum (refused: written before strata moved to XXH3). 2: XXH3-64.
constexpr uint32_t kVersion = 2;

class HashingWriter {
 public:
  explicit HashingWriter(std::ofstream& out) : out_(out) {}
  void Write(const void* p, size_t n) {
    hash_.Update(p, n);
    out_.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
  }
  template <class T>
  void Put(T v) { Write(&v, sizeof(v)); }
  uint64_t hash() const { return hash_.Digest(); }

 private:
  std::ofstream& out_;
  Checksum64Stream hash_;
};

class HashingReader {
 public:
  explicit HashingReader(std::ifstream& in) : in_(in) {}
  bool Read(void* p, size_t n) {
    if (!in_.read(static_cast<char*>(p), static_cast<std::streamsize>(n))) return false;
    hash_.Update(p, n);
    return true;
  }
  template <class T>
  bool Get(T& v) { return Read(&v, sizeof(v)); }
  uint64_t hash() const { return hash_.Digest(); }

 private:
  std::ifstream& in_;
  Checksum64Stream hash_;
};

// fsync of a file or directory by path.
Status SyncPath(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return ErrnoStatus("cannot open to sync", path, errno);
  const int r = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  return r == 0 ? Status::OK() : ErrnoStatus("cannot fsync", path, err);
}

// Replaces `to` by `from` durably: `from` synced, renamed, the directory synced.
Status DurableRename(const std::string& from, const std::string& to, const std::string& dir) {
  STRATA_RETURN_IF_ERROR(SyncPath(from, false));
  std::error_code ec;
  std::filesystem::rename(from, to, ec);
  if (ec) return Status::IOError("cannot rename " + from + " to " + to + ": " + ec.message());
  return SyncPath(dir, true);
}

}  // namespace

Result<std::string> WriteCheckpoint(const std::string& dir, const CheckpointHeader& header,
                                    const NamedTensors& tensors) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir + ": " + ec.message());
  const std::string name = "ckpt-" + std::to_string(header.step) + ".bin";
  const std::string tmp = dir + "/" + name + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::IOError("cannot write " + tmp);
    HashingWriter w(out);
    w.Write(kMagic, sizeof(kMagic));
    w.Put(kVersion);
    w.Put<int64_t>(header.step);
    w.Put<int64_t>(header.data_position);
    w.Put<int64_t>(header.optimizer_step);
    w.Put(static_cast<uint32_t>(tensors.size()));
    for (const auto& [tname, t] : tensors) {
      Tensor host = ToHost(t);
      w.Put(static_cast<uint32_t>(tname.size()));
      w.Write(tname.data(), tname.size());
      w.Put<int64_t>(host.numel());
      w.Write(host.data(), host.nbytes());
    }
    const uint64_t h = w.hash();
    out.write(reinterpret_cast<const char*>(&h), sizeof(h));
    out.flush();
    if (!out) return Status::IOError("writing " + tmp + " failed (disk full?)");
  }
  const std::string path = dir + "/" + name;
  STRATA_RETURN_IF_ERROR(DurableRename(tmp, path, dir));
  STRATA_RETURN_IF_ERROR(WriteFileDurably(dir + "/latest", name + "\n"));
  return path;
}

std::string LatestCheckpoint(const std::string& dir) {
  std::ifstream in(dir + "/latest");
  std::string name;
  if (!in || !std::getline(in, name) || name.empty()) return "";
  return dir + "/" + name;
}

Status ReadCheckpoint(const std::string& path, const NamedTensors& tensors, CheckpointHeader* header) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open checkpoint " + path);
  HashingReader r(in);
  auto bad = [&](const std::string& what) { return Status::Corruption(path + ": " + what); };
  char magic[8];
  uint32_t version = 0, count = 0;
  CheckpointHeader h;
  if (!r.Read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return bad("not a strata checkpoint");
  if (!r.Get(version)) return bad("truncated header");
  if (version != kVersion) {
    return Status::FailedPrecondition(path + ": checkpoint format version " + std::to_string(version) +
                                      (version == 1 ? " (FNV-1a checksums, before XXH3)" : "") +
                                      "; this strata reads version " + std::to_string(kVersion));
  }
  if (!r.Get(h.step) || !r.Get(h.data_position) || !r.Get(h.optimizer_step) || !r.Get(count)) {
    return bad("truncated header");
  }
  std::map<std::string, Tensor> want(tensors.begin(), tensors.end());
  if (count != want.size()) {
    return Status::InvalidArgument(path + ": holds " + std::to_string(count) + " tensors, the model and optimizer have " + std::to_string(want.size()));
  }
  std::vector<std::pair<Tensor, Tensor>> loaded;  // (destination, host values): applied after the checksum
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t len = 0;
    if (!r.Get(len) || len > 4096) return bad("bad tensor name");
    std::string name(len, '\0');
    int64_t numel = 0;
    if (!r.Read(name.data(), len) || !r.Get(numel)) return bad("truncated tensor header");
    auto it = want.find(name);
    if (it == want.end()) return Status::InvalidArgument(path + ": unknown tensor " + name);
    if (numel != it->second.numel()) return Status::InvalidArgument(path + ": " + name + " has a different size");
    Tensor host = ops::NewTensor(ops::Exec::Cpu(), it->second.shape());
    if (!r.Read(host.data(), host.nbytes())) return bad("truncated values of " + name);
    loaded.emplace_back(it->second, host);
  }
  const uint64_t hash = r.hash();
  uint64_t stored = 0;
  if (!in.read(reinterpret_cast<char*>(&stored), sizeof(stored)) || stored != hash) return bad("checksum mismatch");
  for (auto& [dst, host] : loaded) STRATA_RETURN_IF_ERROR(dst.CopyFrom(host));
  *header = h;
  return Status::OK();
}

}  // namespace strata
