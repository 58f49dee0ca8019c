// store_format.cc: the checkpoint manifest and export files.
#include "offload/internal/store_format.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "common/file.h"

namespace strata::offload_internal {
namespace {

constexpr std::string_view kManifestPrefix = "strata-checkpoint ";
constexpr std::string_view kManifestVersion = "2";
constexpr char kExportMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'X', '2'};  // "STRATAX" + version
constexpr char kExportEnd[8] = {'S', 'T', 'R', 'A', 'T', 'E', 'N', 'D'};
constexpr size_t kExportHeader = 16;
constexpr size_t kExportTrailer = 24;

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Splits off the next line (without its '\n'); false at the end of the text.
bool NextLine(std::string_view& text, std::string_view* line) {
  if (text.empty()) return false;
  const size_t nl = text.find('\n');
  if (nl == std::string_view::npos) return false;  // every manifest line ends with '\n'
  *line = text.substr(0, nl);
  text.remove_prefix(nl + 1);
  return true;
}

// A file of another format version than this build reads: FailedPrecondition, never Corruption,
// so that callers looking for an intact file do not skip it silently.
Status WrongVersion(std::string_view what, const std::string& path, std::string_view found,
                    std::string_view expected) {
  std::string why = std::string(what) + " " + path + " has format version " + std::string(found) +
                    ", this build reads only version " + std::string(expected);
  if (found == "1") why += " (version 1: written by a strata build from before XXH3 checksums)";
  return Status::FailedPrecondition(why);
}

// A format version as files write it: 1 to 4 digits.
bool IsVersion(std::string_view s) {
  return !s.empty() && s.size() <= 4 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool ParseU64(std::string_view s, uint64_t* v, int base = 10) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v, base);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

}  // namespace

std::string EncodeManifest(const CheckpointManifest& m) {
  std::string s = std::string(kManifestPrefix) + std::string(kManifestVersion) + "\n";
  s += "width " + std::to_string(m.width) + "\n";
  s += "clock " + std::to_string(m.clock) + "\n";
  s += "records " + std::to_string(m.records) + "\n";
  for (const auto& [name, size] : m.files) s += "file " + name + " " + std::to_string(size) + "\n";
  s += "metadata " + std::to_string(m.metadata.size()) + "\n" + m.metadata + "\n";
  s += "checksum " + Hex64(Checksum64(s.data(), s.size())) + "\n";
  return s;
}

Result<CheckpointManifest> DecodeManifest(std::string_view text, const std::string& path) {
  auto corrupt = [&](std::string_view why) {
    return Status::Corruption("checkpoint manifest " + path + ": " + std::string(why));
  };
  // The version first: another version's checksum would only read as a mismatch.
  const std::string_view first = text.substr(0, text.find('\n'));
  if (first.substr(0, kManifestPrefix.size()) == kManifestPrefix) {
    const std::string_view version = first.substr(kManifestPrefix.size());
    if (IsVersion(version) && version != kManifestVersion) {
      return WrongVersion("checkpoint manifest", path, version, kManifestVersion);
    }
  }
  const size_t at = text.rfind("checksum ");
  if (at == std::string_view::npos || text.empty() || text.back() != '\n') {
    return corrupt("truncated (no checksum line)");
  }
  uint64_t want = 0;
  if (!ParseU64(text.substr(at + 9, text.size() - at - 10), &want, 16)) {
    return corrupt("unreadable checksum");
  }
  if (Checksum64(text.data(), at) != want) return corrupt("checksum mismatch");
  std::string_view body = text.substr(0, at), line;
  if (!NextLine(body, &line) || line.substr(0, kManifestPrefix.size()) != kManifestPrefix ||
      line.substr(kManifestPrefix.size()) != kManifestVersion) {
    return corrupt("not a strata checkpoint");
  }
  CheckpointManifest m;
  uint64_t width = 0;
  while (NextLine(body, &line)) {
    const size_t sp = line.find(' ');
    const std::string_view field = line.substr(0, sp);
    const std::string_view rest = sp == std::string_view::npos ? "" : line.substr(sp + 1);
    if (field == "width") {
      if (!ParseU64(rest, &width) || width == 0 || width > (1u << 24)) return corrupt("bad width");
      m.width = static_cast<int>(width);
    } else if (field == "clock") {
      if (!ParseU64(rest, &m.clock)) return corrupt("bad clock");
    } else if (field == "records") {
      if (!ParseU64(rest, &m.records)) return corrupt("bad record count");
    } else if (field == "file") {
      const size_t sp2 = rest.rfind(' ');
      uint64_t size = 0;
      if (sp2 == std::string_view::npos || !ParseU64(rest.substr(sp2 + 1), &size)) {
        return corrupt("bad file line");
      }
      m.files.emplace_back(std::string(rest.substr(0, sp2)), size);
    } else if (field == "metadata") {
      uint64_t n = 0;
      if (!ParseU64(rest, &n) || n + 1 > body.size() || body[n] != '\n') {
        return corrupt("bad metadata length");
      }
      m.metadata = std::string(body.substr(0, n));
      body.remove_prefix(n + 1);
    } else {
      return corrupt("unknown field '" + std::string(field) + "'");
    }
  }
  if (!body.empty() || m.width == 0) return corrupt("incomplete");
  return m;
}

ExportWriter::~ExportWriter() {
  if (f_) {
    std::fclose(f_);
    std::remove((path_ + ".tmp").c_str());
  }
}

Result<std::unique_ptr<ExportWriter>> ExportWriter::Create(const std::string& path, int width) {
  std::FILE* f = std::fopen((path + ".tmp").c_str(), "wb");
  if (!f) return ErrnoStatus("cannot create", path + ".tmp", errno);
  auto w = std::unique_ptr<ExportWriter>(new ExportWriter(path, width, f));
  const uint32_t header[2] = {static_cast<uint32_t>(width), 0};
  STRATA_RETURN_IF_ERROR(w->Write(kExportMagic, sizeof(kExportMagic)));
  STRATA_RETURN_IF_ERROR(w->Write(header, sizeof(header)));
  return w;
}

Status ExportWriter::Write(const void* data, size_t size) {
  checksum_.Update(data, size);
  if (std::fwrite(data, 1, size, f_) != size) return ErrnoStatus("cannot write", path_ + ".tmp", errno);
  return Status::OK();
}

Status ExportWriter::Add(uint64_t key, const float* record) {
  ++count_;
  STRATA_RETURN_IF_ERROR(Write(&key, sizeof(key)));
  return Write(record, sizeof(float) * width_);
}

Status ExportWriter::Finish() {
  STRATA_RETURN_IF_ERROR(Write(kExportEnd, sizeof(kExportEnd)));
  STRATA_RETURN_IF_ERROR(Write(&count_, sizeof(count_)));
  const uint64_t hash = checksum_.Digest();
  if (std::fwrite(&hash, 1, sizeof(hash), f_) != sizeof(hash) || std::fflush(f_) != 0 ||
      ::fsync(::fileno(f_)) != 0) {
    return ErrnoStatus("cannot write", path_ + ".tmp", errno);
  }
  std::fclose(f_);
  f_ = nullptr;
  if (std::rename((path_ + ".tmp").c_str(), path_.c_str()) != 0) {
    return ErrnoStatus("cannot rename", path_ + ".tmp", errno);
  }
  return Status::OK();
}

Result<ExportReader> ExportReader::Open(const std::string& path, int width) {
  ExportReader r;
  STRATA_ASSIGN_OR_RETURN(r.bytes_, ReadWholeFile(path));
  auto corrupt = [&](std::string_view why) {
    return Status::Corruption("export file " + path + ": " + std::string(why));
  };
  const std::string& b = r.bytes_;
  if (b.size() >= 8 && std::memcmp(b.data(), kExportMagic, 7) == 0 && IsVersion(b.substr(7, 1)) &&
      b[7] != kExportMagic[7]) {
    return WrongVersion("export file", path, b.substr(7, 1), std::string_view(&kExportMagic[7], 1));
  }
  if (b.size() < kExportHeader + kExportTrailer || std::memcmp(b.data(), kExportMagic, 8) != 0) {
    return corrupt("not a strata export file");
  }
  uint32_t file_width = 0;
  std::memcpy(&file_width, b.data() + 8, 4);
  if (file_width != static_cast<uint32_t>(width)) {
    return Status::InvalidArgument("export file " + path + " has records of " +
                                   std::to_string(file_width) + " floats, the store " +
                                   std::to_string(width));
  }
  const size_t trailer = b.size() - kExportTrailer;
  uint64_t count = 0, hash = 0;
  std::memcpy(&count, b.data() + trailer + 8, 8);
  std::memcpy(&hash, b.data() + trailer + 16, 8);
  const uint64_t record_bytes = 8 + 4ull * width;
  if (std::memcmp(b.data() + trailer, kExportEnd, 8) != 0 ||
      count != (trailer - kExportHeader) / record_bytes ||
      (trailer - kExportHeader) % record_bytes != 0) {
    return corrupt("truncated or malformed");
  }
  if (Checksum64(b.data(), b.size() - 8) != hash) return corrupt("checksum mismatch");
  r.width_ = width;
  r.count_ = count;
  return r;
}

uint64_t ExportReader::key(uint64_t i) const {
  uint64_t k;
  std::memcpy(&k, bytes_.data() + kExportHeader + i * (8 + 4ull * width_), 8);
  return k;
}

const float* ExportReader::record(uint64_t i) const {
  // The header and each record are multiples of 4 bytes, and std::string data is malloc-aligned.
  return reinterpret_cast<const float*>(bytes_.data() + kExportHeader + i * (8 + 4ull * width_) + 8);
}

}  // namespace strata::offload_internal
