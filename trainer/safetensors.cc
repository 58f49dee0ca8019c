// safetensors.cc: ExportSafetensors and ImportSafetensors.
#include "trainer/safetensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

namespace strata {
namespace {

namespace fs = std::filesystem;

// (strata, exported) name patterns; "#" is a block index.
struct Rule {
  const char* strata;
  const char* exported;
  bool transpose;
};
constexpr Rule kGptRules[] = {
    {"gpt.tok.weight", "transformer.wte.weight", false},
    {"gpt.pos.weight", "transformer.wpe.weight", false},
    {"gpt.block#.ln1.weight", "transformer.h.#.ln_1.weight", false},
    {"gpt.block#.ln1.bias", "transformer.h.#.ln_1.bias", false},
    {"gpt.block#.attn.qkv.weight", "transformer.h.#.attn.c_attn.weight", false},
    {"gpt.block#.attn.qkv.bias", "transformer.h.#.attn.c_attn.bias", false},
    {"gpt.block#.attn.proj.weight", "transformer.h.#.attn.c_proj.weight", false},
    {"gpt.block#.attn.proj.bias", "transformer.h.#.attn.c_proj.bias", false},
    {"gpt.block#.ln2.weight", "transformer.h.#.ln_2.weight", false},
    {"gpt.block#.ln2.bias", "transformer.h.#.ln_2.bias", false},
    {"gpt.block#.mlp.fc1.weight", "transformer.h.#.mlp.c_fc.weight", false},
    {"gpt.block#.mlp.fc1.bias", "transformer.h.#.mlp.c_fc.bias", false},
    {"gpt.block#.mlp.fc2.weight", "transformer.h.#.mlp.c_proj.weight", false},
    {"gpt.block#.mlp.fc2.bias", "transformer.h.#.mlp.c_proj.bias", false},
    {"gpt.ln_f.weight", "transformer.ln_f.weight", false},
    {"gpt.ln_f.bias", "transformer.ln_f.bias", false},
    {"gpt.head.weight", "lm_head.weight", true},
};

// `pattern` with "#" for a block index against `name`: the index ("" when the pattern has
// none), or nullopt.
std::optional<std::string> Match(const std::string& pattern, const std::string& name) {
  const size_t hash = pattern.find('#');
  if (hash == std::string::npos) return pattern == name ? std::optional<std::string>("") : std::nullopt;
  const std::string head = pattern.substr(0, hash), tail = pattern.substr(hash + 1);
  if (name.size() <= head.size() + tail.size() || !name.starts_with(head) || !name.ends_with(tail)) return std::nullopt;
  const std::string index = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return index;
}

std::string Fill(const std::string& pattern, const std::string& index) {
  const size_t hash = pattern.find('#');
  return hash == std::string::npos ? pattern : pattern.substr(0, hash) + index + pattern.substr(hash + 1);
}

bool IsOptimizerState(const std::string& name) { return name.find('/') != std::string::npos; }

// [r, c] -> [c, r].
std::vector<float> Transposed(const float* x, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) out[static_cast<size_t>(j * rows + i)] = x[i * cols + j];
  }
  return out;
}

}  // namespace

std::string ExportName(const std::string& name, bool* transpose) {
  *transpose = false;
  for (const Rule& r : kGptRules) {
    if (auto index = Match(r.strata, name)) {
      *transpose = r.transpose;
      return Fill(r.exported, *index);
    }
  }
  return name;
}

Result<std::string> ImportName(const std::string& name, bool* transpose) {
  *transpose = false;
  for (const Rule& r : kGptRules) {
    if (auto index = Match(r.exported, name)) {
      *transpose = r.transpose;
      return Fill(r.strata, *index);
    }
  }
  if (name.starts_with("transformer.") || name.starts_with("lm_head.")) {
    return Status::InvalidArgument("tensor " + name + " has a GPT-2 name strata's gpt has no parameter for");
  }
  return name;
}

Status ExportSafetensors(const CheckpointReader& reader, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(const std::vector<ShardTensor> tensors, ReadWhole(reader));
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"},
                            {"strata_step", std::to_string(reader.manifest().step)},
                            {"strata_plan", reader.manifest().PlanString()}};
  std::vector<std::vector<float>> data;
  uint64_t offset = 0;
  for (const ShardTensor& t : tensors) {
    if (IsOptimizerState(t.name)) continue;
    bool transpose = false;
    const std::string name = ExportName(t.name, &transpose);
    Shape shape = t.value.shape();
    const float* x = t.value.data_as<float>();
    if (transpose) {
      if (shape.size() != 2) return Status::Internal(t.name + " is not 2-D");
      data.push_back(Transposed(x, shape[0], shape[1]));
      std::swap(shape[0], shape[1]);
    } else {
      data.emplace_back(x, x + t.value.numel());
    }
    const uint64_t bytes = data.back().size() * sizeof(float);
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::IOError("cannot create " + path);
  const uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& d : data) out.write(reinterpret_cast<const char*>(d.data()), static_cast<std::streamsize>(d.size() * sizeof(float)));
  out.flush();
  if (!out) return Status::IOError("writing " + path + " failed");
  return Status::OK();
}

Result<std::string> ImportSafetensors(const std::string& path, const std::string& dir) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open " + path);
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) return Status::IOError(path + ": " + ec.message());
  unsigned char len[8];
  if (size < 8 || !in.read(reinterpret_cast<char*>(len), 8)) return Status::InvalidArgument(path + ": shorter than a safetensors header");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  if (n > size - 8 || n > (uint64_t{100} << 20)) {
    return Status::InvalidArgument(path + ": header of " + std::to_string(n) + " bytes in a file of " + std::to_string(size));
  }
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  auto header = nlohmann::json::parse(text, nullptr, false);
  if (!in || !header.is_object()) return Status::InvalidArgument(path + ": the header is not a JSON object");
  const uint64_t base = 8 + n, data_bytes = size - base;
  CheckpointManifest m;
  std::vector<ShardTensor> tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (entry.contains("strata_step")) m.step = std::stoll(entry["strata_step"].get<std::string>());
      continue;
    }
    const std::string where = path + ": tensor " + name;
    if (!entry.is_object() || entry.value("dtype", "") != "F32") {
      return Status::InvalidArgument(where + ": dtype " + (entry.is_object() ? entry.value("dtype", "?") : "?") + " (F32 only)");
    }
    if (!entry.contains("shape") || !entry["shape"].is_array() || !entry.contains("data_offsets") ||
        !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
      return Status::InvalidArgument(where + ": needs shape and data_offsets [begin, end]");
    }
    Shape shape = entry["shape"].get<Shape>();
    const auto begin = entry["data_offsets"][0].get<uint64_t>(), end = entry["data_offsets"][1].get<uint64_t>();
    auto numel = ShapeNumel(shape);
    if (!numel.ok() || begin > end || end > data_bytes || end - begin != static_cast<uint64_t>(*numel) * sizeof(float)) {
      return Status::InvalidArgument(where + ": bytes [" + std::to_string(begin) + ", " + std::to_string(end) +
                                     ") do not hold its shape " + ShapeToString(shape) + " in " +
                                     std::to_string(data_bytes) + " data bytes");
    }
    auto storage = std::make_shared<std::vector<float>>(static_cast<size_t>(*numel));
    in.seekg(static_cast<std::streamoff>(base + begin));
    if (!in.read(reinterpret_cast<char*>(storage->data()), static_cast<std::streamsize>(end - begin))) {
      return Status::IOError(where + ": read failed");
    }
    bool transpose = false;
    STRATA_ASSIGN_OR_RETURN(const std::string strata_name, ImportName(name, &transpose));
    if (transpose) {
      if (shape.size() != 2) return Status::InvalidArgument(where + ": expected 2-D");
      *storage = Transposed(storage->data(), shape[0], shape[1]);
      std::swap(shape[0], shape[1]);
    }
    tensors.push_back({strata_name, ShardSpec::Whole(shape),
                       Tensor::FromBlob(storage->data(), shape, DType::kF32, Device::CPU(), storage)});
  }
  m.plan = "import " + fs::path(path).filename().string();
  return WriteWholeCheckpoint(dir, std::move(m), tensors);
}

}  // namespace strata
