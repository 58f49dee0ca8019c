// checkpoint_manifest.cc: CheckpointManifest to and from JSON.
#include "trainer/checkpoint_manifest.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace strata {
namespace {

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

std::string CheckpointManifest::ToJson() const {
  nlohmann::json files_json = nlohmann::json::array();
  for (const File& f : files) {
    files_json.push_back({{"name", f.name}, {"bytes", f.digest.bytes}, {"xxh3", Hex(f.digest.checksum)}});
  }
  nlohmann::json j = {
      {"format", "strata-checkpoint"},
      {"version", kCheckpointFormat},
      {"step", step},
      {"optimizer_step", optimizer_step},
      {"data", {{"batches", data_batches}, {"batch_size", batch_size}, {"micro_batches", micro_batches}}},
      {"plan", {{"dp", dp}, {"tp", tp}, {"pp", pp}, {"vpp", vpp}, {"text", plan}}},
      {"files", files_json},
  };
  return j.dump(2) + "\n";
}

Result<CheckpointManifest> CheckpointManifest::FromJson(const std::string& text, const std::string& where) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  auto bad = [&](const std::string& what) { return Status::InvalidArgument(where + ": " + what); };
  if (!j.is_object() || j.value("format", "") != "strata-checkpoint") return bad("not a strata checkpoint manifest");
  if (!j.contains("version") || !j["version"].is_number_unsigned() || j["version"].get<uint32_t>() != kCheckpointFormat) {
    return Status::FailedPrecondition(where + ": manifest of format version " + j.value("version", nlohmann::json()).dump() +
                                      "; this strata reads version " + std::to_string(kCheckpointFormat));
  }
  CheckpointManifest m;
  try {
    m.step = j.at("step").get<int64_t>();
    m.optimizer_step = j.at("optimizer_step").get<int64_t>();
    const auto& d = j.at("data");
    m.data_batches = d.at("batches").get<int64_t>();
    m.batch_size = d.at("batch_size").get<int64_t>();
    m.micro_batches = d.at("micro_batches").get<int>();
    const auto& p = j.at("plan");
    m.dp = p.at("dp").get<int>();
    m.tp = p.at("tp").get<int>();
    m.pp = p.at("pp").get<int>();
    m.vpp = p.at("vpp").get<int>();
    m.plan = p.value("text", "");
    for (const auto& f : j.at("files")) {
      File file;
      file.name = f.at("name").get<std::string>();
      file.digest.bytes = f.at("bytes").get<uint64_t>();
      file.digest.checksum = std::stoull(f.at("xxh3").get<std::string>(), nullptr, 16);
      if (file.name.empty() || file.name.find('/') != std::string::npos) return bad("bad file name \"" + file.name + "\"");
      m.files.push_back(std::move(file));
    }
  } catch (const std::exception& e) {  // nlohmann's type and key errors, stoull's
    return bad(std::string("malformed manifest: ") + e.what());
  }
  return m;
}

std::string CheckpointManifest::PlanString() const {
  const std::string s = "dp=" + std::to_string(dp) + " tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) +
                        " vpp=" + std::to_string(vpp);
  // A trainer's plan text starts with the same figures; a conversion's says what it was.
  if (plan.empty() || plan.starts_with(s)) return plan.empty() ? s : plan;
  return s + " (" + plan + ")";
}

}  // namespace strata
