// table_file.cc: encoding and decoding of a server's tables file.
#include "ps/table_file.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>

#include "offload/store_format.h"

namespace strata {
namespace {

using offload_internal::Fnv1a64;

constexpr std::string_view kTablesMagic = "strata-tables 1\n";

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
  AppendU64(out, Fnv1a64(out.data(), out.size()));
  return out;
}

Result<std::vector<TableSpec>> DecodeTableSpecs(std::string_view bytes, const std::string& path) {
  auto corrupt = [&](const std::string& what) { return Status::Corruption(path + ": " + what); };
  if (bytes.size() < kTablesMagic.size() + 8 || bytes.substr(0, kTablesMagic.size()) != kTablesMagic) {
    return corrupt("not a strata tables file");
  }
  const size_t body = bytes.size() - 8;
  if (ReadU64(bytes.data() + body) != Fnv1a64(bytes.data(), body)) return corrupt("checksum mismatch");
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
