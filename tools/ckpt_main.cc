// ckpt_main.cc: strata-ckpt, the checkpoint tool (trainer/checkpoint.h):
//   strata-ckpt inspect <checkpoint>            plan, step, tensors, their shards, checksums
//   strata-ckpt to-full <checkpoint> <file>     one file of unsplit tensors
//   strata-ckpt from-full <file> <checkpoint_dir>  back into a checkpoint any plan resumes from
//   strata-ckpt export --format safetensors <checkpoint> <file>  the parameters, PyTorch names
//   strata-ckpt import <file.safetensors> <checkpoint_dir>  parameters any plan serves
// <checkpoint> is a step directory, a checkpoint_dir (its `latest`) or a full-model file.
// Exit codes: 0 done, 1 the checkpoint is damaged or a write failed, 2 bad usage.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "trainer/checkpoint.h"
#include "trainer/safetensors.h"

namespace strata {
namespace {

constexpr int kDamaged = 1;
constexpr int kBadInput = 2;

int Fail(const Status& s) {
  std::cerr << "strata-ckpt: " << s.ToString() << "\n";
  return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound ? kBadInput : kDamaged;
}

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// "pp rank 0, tp rank 1, " from a shard file's meta; empty for a file no rank wrote (a
// full-model file, or the one shard from-full writes).
std::string RanksOf(const ShardFile& f) {
  const auto j = nlohmann::json::parse(f.meta(), nullptr, false);
  if (!j.is_object() || !j.contains("pp_rank") || !j.contains("tp_rank") || !j["pp_rank"].is_number_integer() ||
      !j["tp_rank"].is_number_integer()) {
    return "";
  }
  return "pp rank " + std::to_string(j["pp_rank"].get<int>()) + ", tp rank " + std::to_string(j["tp_rank"].get<int>()) +
         ", ";
}

// Where a tensor's shards are. Split into equal parts over the tensor-parallel ranks (every
// source one part of the same split):
//   "2 parts [32, 48] on axis 1 (3 blocks): part 0 in shard-pp0-tp0.bin, part 1 in shard-pp0-tp1.bin"
// otherwise every source with its split: "shard-pp0-tp0.bin (whole)".
std::string SourcesOf(const CheckpointReader& reader, const CheckpointReader::TensorInfo& info) {
  const auto spec = [&](const CheckpointReader::Source& s) -> const ShardSpec& {
    return reader.files()[s.file].entries()[s.entry].spec;
  };
  const auto file = [&](const CheckpointReader::Source& s) { return reader.manifest().files[s.file].name; };
  const ShardSpec& first = spec(info.sources[0]);
  bool one_split = !first.whole();
  for (const CheckpointReader::Source& s : info.sources) {
    one_split = one_split && !spec(s).whole() && spec(s).axis == first.axis && spec(s).blocks == first.blocks &&
                spec(s).parts == first.parts;
  }
  std::string out;
  if (!one_split) {
    for (const CheckpointReader::Source& s : info.sources) out += " " + file(s) + " (" + spec(s).ToString() + ")";
    return out;
  }
  out = " " + std::to_string(first.parts) + " parts " + ShapeToString(first.LocalShape()) + " on axis " +
        std::to_string(first.axis) + (first.blocks > 1 ? " (" + std::to_string(first.blocks) + " blocks)" : "") + ":";
  for (size_t i = 0; i < info.sources.size(); ++i) {
    out += (i ? ", part " : " part ") + std::to_string(spec(info.sources[i]).index) + " in " + file(info.sources[i]);
  }
  return out;
}

int Inspect(const std::string& path) {
  auto reader = CheckpointReader::Open(path);
  if (!reader.ok()) return Fail(reader.status());
  const CheckpointManifest& m = reader->manifest();
  std::cout << "checkpoint " << reader->path() << " (format " << kCheckpointFormat << ")\n"
            << "  written by " << m.PlanString() << "\n"
            << "  step " << m.step << ", optimizer step " << m.optimizer_step << ", data: " << m.data_batches
            << " global batches of " << m.batch_size << " samples (" << m.micro_batches << " per step)\n";
  // Whole-file checksums against the manifest (a full-model file has only its index's and
  // its tensors' own: read every tensor to check them).
  bool ok = true;
  std::cout << "files:\n";
  for (size_t i = 0; i < reader->files().size(); ++i) {
    const ShardFile& f = reader->files()[i];
    const CheckpointManifest::File& want = m.files[i];
    std::string verdict;
    if (reader->full_file()) {
      verdict = "full-model file, every tensor's checksum ok";
      std::vector<float> buf;
      for (const TensorEntry& e : f.entries()) {
        buf.resize(e.bytes / sizeof(float));
        if (Status s = f.Read(e, buf.data()); !s.ok()) {
          verdict = "DAMAGED: " + s.message();
          ok = false;
          break;
        }
      }
    } else {
      auto d = f.Digest();
      if (!d.ok()) {
        verdict = "UNREADABLE: " + d.status().ToString();
      } else if (d->checksum != want.digest.checksum || d->bytes != want.digest.bytes) {
        verdict = "CHECKSUM MISMATCH: xxh3 " + Hex(d->checksum) + ", manifest says " + Hex(want.digest.checksum);
      } else {
        verdict = "xxh3 " + Hex(d->checksum) + " ok";
      }
      ok = ok && verdict.ends_with(" ok");
    }
    int split = 0;
    for (const TensorEntry& e : f.entries()) split += e.spec.whole() ? 0 : 1;
    std::cout << "  " << want.name << "  " << RanksOf(f) << f.size() << " bytes, " << f.entries().size()
              << " tensors (" << split << " split), " << verdict << "\n";
  }
  int split = 0;
  for (const auto& [name, info] : reader->tensors()) {
    split += reader->files()[info.sources[0].file].entries()[info.sources[0].entry].spec.whole() ? 0 : 1;
  }
  std::cout << "tensors (" << reader->tensors().size() << ": " << split << " split over tensor-parallel ranks, "
            << reader->tensors().size() - split << " whole):\n";
  for (const auto& [name, info] : reader->tensors()) {
    std::cout << "  " << name << " " << ShapeToString(info.global) << ":" << SourcesOf(*reader, info) << "\n";
  }
  std::cout << (ok ? "checksums ok\n" : "checksums FAILED\n");
  return ok ? 0 : kDamaged;
}

int Run(int argc, char** argv) {
  CLI::App app{"strata-ckpt: inspects trainer checkpoints, converts them to and from one full-model file, exports and imports safetensors"};
  app.require_subcommand(1);
  std::string in, out;
  CLI::App* inspect = app.add_subcommand("inspect", "the plan that wrote a checkpoint, its step, every tensor's global "
                                                    "shape and shards, and whether the files' checksums match");
  inspect->add_option("checkpoint", in, "step directory, checkpoint_dir (follows latest) or full-model file")->required();
  CLI::App* to_full = app.add_subcommand("to-full", "writes every tensor of a checkpoint unsplit into one file");
  to_full->add_option("checkpoint", in, "step directory, checkpoint_dir or full-model file")->required();
  to_full->add_option("file", out, "the full-model file to write")->required();
  CLI::App* from_full = app.add_subcommand("from-full", "writes a full-model file as checkpoint_dir/step-<N>/ "
                                                        "(and points latest at it): any plan resumes from it");
  from_full->add_option("file", in, "a full-model file (strata-ckpt to-full)")->required();
  from_full->add_option("checkpoint_dir", out, "the checkpoint directory to write into")->required();
  std::string format = "safetensors";
  CLI::App* exp = app.add_subcommand("export", "writes a checkpoint's parameters (no optimizer state) whole into one "
                                               "file under PyTorch-style names (gpt: GPT-2's)");
  exp->add_option("--format", format, "safetensors")->check(CLI::IsMember({"safetensors"}))->capture_default_str();
  exp->add_option("checkpoint", in, "step directory, checkpoint_dir or full-model file")->required();
  exp->add_option("file", out, "the file to write")->required();
  CLI::App* imp = app.add_subcommand("import", "writes a safetensors file's parameters as checkpoint_dir/step-<N>/: "
                                               "inference (infer.checkpoint) loads it into any plan");
  imp->add_option("file", in, "a safetensors file of F32 tensors")->required();
  imp->add_option("checkpoint_dir", out, "the checkpoint directory to write into")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "strata-ckpt: " << e.what() << "\n";
    return kBadInput;
  }
  if (inspect->parsed()) return Inspect(in);
  if (to_full->parsed()) {
    auto reader = CheckpointReader::Open(in);
    if (!reader.ok()) return Fail(reader.status());
    if (Status s = ToFullModel(*reader, out); !s.ok()) return Fail(s);
    std::cout << "wrote " << reader->tensors().size() << " tensors of step " << reader->manifest().step << " to "
              << out << "\n";
    return 0;
  }
  if (exp->parsed()) {
    auto reader = CheckpointReader::Open(in);
    if (!reader.ok()) return Fail(reader.status());
    if (Status s = ExportSafetensors(*reader, out); !s.ok()) return Fail(s);
    std::cout << "wrote the parameters of step " << reader->manifest().step << " to " << out << "\n";
    return 0;
  }
  auto dir = imp->parsed() ? ImportSafetensors(in, out) : FromFullModel(in, out);
  if (!dir.ok()) return Fail(dir.status());
  std::cout << "wrote " << *dir << " (latest)\n";
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::Run(argc, argv); }
