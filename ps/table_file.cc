// table_file.cc: encoding and decoding of a server's tables file.
#include "ps/table_file.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>

#include "common/checksum.h"

namespace strata {
namespace {

// "strata-tables <format version>\n". Version 1 had FNV-1a checksums.
constexpr std::string_view kTablesPrefix = "strata-tables ";
constexpr std::string_view kTablesMagic = "strata-tables 2\n";

// The version digit of a tables file of another format version, else 0.
char OtherVersion(std::string_view bytes) {
  if (bytes.size() < kTablesMagic.size() || !bytes.starts_with(kTablesPrefix)) return 0;
  const char v = bytes[kTablesPrefix.size()];
  const bool other = v >= '0' && v <= '9' && bytes[kTablesMagic.size() - 1] == '\n' &&
                     bytes.substr(0, kTablesMagic.size()) != kTablesMagic;
  return other ? v : 0;
}

void AppendU64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); }
uint64_t ReadU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

}  // namespace

std::string EncodeTableSpecs(const std::vector<const TableSpec*>& specs) {
  std::string out(kTablesMagic);
  for (const TableSpec* spec : specs) {
    capnp::MallocMessageBuilder message;
    ToWire(*spec, message.initRoot<wire::TableSpec>());
    const kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
    const auto bytes = words.asBytes();
    AppendU64(out, bytes.size());
    out.append(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  }
  AppendU64(out, Checksum64(out.data(), out.size()));
  return out;
}

Result<std::vector<TableSpec>> DecodeTableSpecs(std::string_view bytes, const std::string& path) {
  auto corrupt = [&](const std::string& what) { return Status::Corruption(path + ": " + what); };
  // The version first: another version's checksum would only read as a mismatch.
  if (const char v = OtherVersion(bytes)) {
    return Status::FailedPrecondition(
        path + ": tables file of format version " + v + ", this build reads only version 2" +
        (v == '1' ? " (version 1: written by a strata build from before XXH3 checksums)" : ""));
  }
  if (bytes.size() < kTablesMagic.size() + 8 || bytes.substr(0, kTablesMagic.size()) != kTablesMagic) {
    return corrupt("not a strata tables file");
  }
  const size_t body = bytes.size() - 8;
  if (ReadU64(bytes.data() + body) != Checksum64(bytes.data(), body)) {
    return corrupt("checksum mismatch");
  }
  std::vector<TableSpec> specs;
  for (size_t at = kTablesMagic.size(); at < body;) {
    if (body - at < 8) return corrupt("truncated entry");
    const uint64_t n = ReadU64(bytes.data() + at);
    at += 8;
    if (n == 0 || n % sizeof(capnp::word) != 0 || n > body - at) return corrupt("bad entry length");
    kj::Array<capnp::word> words = kj::heapArray<capnp::word>(n / sizeof(capnp::word));
    std::memcpy(words.begin(), bytes.data() + at, n);
    at += n;
    TableSpec spec;
    try {
      capnp::FlatArrayMessageReader reader(words);
      spec = FromWire(reader.getRoot<wire::TableSpec>());
    } catch (const kj::Exception& e) {
      return corrupt(std::string("bad table spec: ") + e.getDescription().cStr());
    }
    if (Status s = spec.Validate(); !s.ok()) return corrupt("invalid table spec: " + s.message());
    specs.push_back(std::move(spec));
  }
  return specs;
}


}  // namespace strata
