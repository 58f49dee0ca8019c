// infer_bench.cc: strata-bench infer: gpt generation with a KV cache (infer.mode generate) on one
// process and on tensor-parallel trainer processes, tokens/s and per-step latency at each batch
// size, beside PyTorch eager (Debian's python3-torch; tools/bench/torch_gpt_infer.py) running
// the same weights, exported by strata-ckpt as safetensors, with the same KV-cache algorithm in
// the same run, one thread each, and whether both generated the same greedy tokens.
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "tools/bench/bench.h"

namespace strata::bench {
namespace {

namespace fs = std::filesystem;

struct Options {
  GptShape gpt{4, 128, 4, 128};
  int new_tokens = 64;
  std::string batches = "1,8";
  std::string tps = "1,2";
  std::string data = "/usr/share/common-licenses/GPL-3";
  std::string python = "/usr/bin/python3";
  std::string script = STRATA_BENCH_SCRIPTS "/torch_gpt_infer.py";
  bool keep = false;
};

// The job: the model, the data, a checkpoint after one step.
std::string JobYaml(const Options& o, const std::string& data, const fs::path& work) {
  std::ostringstream y;
  y << "model: " << o.gpt.ModelYaml() << "\n"
    << "data: {kind: text, path: " << data << ", eval_samples: 256}\n"
    << "optimizer: {kind: adamw, lr: 0.001}\n"
    << "train: {steps: 1, batch_size: 4, log_every: 1, progress: false, checkpoint_dir: " << (work / "ckpt").string()
    << ", checkpoint_every: 1}\n"
    << "sync: {mode: local}\n";
  return y.str();
}

// `n` prompts of 8 to 30 bytes cut from the data (printable, as JSON strings).
std::vector<std::string> Prompts(const std::string& data, int n) {
  std::ifstream in(data, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  size_t at = 0;
  for (int i = 0; i < n; ++i) {
    const size_t len = 8 + static_cast<size_t>(i * 7) % 23;
    std::string p;
    while (p.size() < len && at < text.size()) {
      const char c = text[at++];
      p += (c >= 32 && c < 127) ? c : ' ';
    }
    if (p.size() < len) p.append(len - p.size(), 'x');
    out.push_back(p);
  }
  return out;
}

// Tokens per prompt, from the output files of a generation.
std::vector<nlohmann::json> Tokens(const fs::path& dir, const std::string& prefix, size_t prompts) {
  std::vector<nlohmann::json> out(prompts);
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    std::ifstream in(e.path());
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("prompt_index")) out.at(j["prompt_index"].get<size_t>()) = j["tokens"];
    }
  }
  return out;
}

Result<Report> RunInferBench(const Options& o) {
  std::vector<int> batches, tps;
  for (const std::string& s : SplitList(o.batches)) batches.push_back(std::atoi(s.c_str()));
  for (const std::string& s : SplitList(o.tps)) tps.push_back(std::atoi(s.c_str()));
  if (batches.empty() || tps.empty()) return Status::InvalidArgument("--batches and --tp must not be empty");
  for (int t : tps) {
    if (t < 1 || o.gpt.heads % t != 0) return Status::InvalidArgument("--tp " + std::to_string(t) + " must divide --heads");
  }
  const std::string bin = fs::canonical("/proc/self/exe").parent_path().string();
  char tmpl[] = "/tmp/strata-bench-infer-XXXXXX";
  if (!mkdtemp(tmpl)) return Status::IOError(std::string("mkdtemp: ") + std::strerror(errno));
  const fs::path work = tmpl;
  STRATA_ASSIGN_OR_RETURN(const std::string data, TextDataPath(o.data, work));
  const fs::path job = work / "job.yaml";
  std::ofstream(job) << JobYaml(o, data, work);
  Stopwatch total;
  std::cerr << "infer: a checkpoint ... " << std::flush;
  STRATA_RETURN_IF_ERROR(LaunchJob({bin + "/strata-trainer", "-c", job.string()}, work / "train.log"));
  STRATA_RETURN_IF_ERROR(LaunchJob({bin + "/strata-ckpt", "export", "--format", "safetensors", (work / "ckpt").string(),
                                    (work / "model.safetensors").string()},
                                   work / "export.log"));
  std::cerr << "done\n";
  const bool torch = PythonHasTorch(o.python, work / "torch-check.log");
  const unsigned cpus = std::thread::hardware_concurrency();
  Table table("strata-bench infer: gpt generation with a KV cache (greedy), tokens/s beside PyTorch eager",
              {{"batch", "batch", Table::Format::kInteger},
               {"tp", "tp", Table::Format::kInteger},
               {"tokens/s", "tokens_per_s", Table::Format::kFixed1},
               {"ms/step", "decode_ms_per_step", Table::Format::kFixed2},
               {"prefill ms", "prefill_ms", Table::Format::kFixed2},
               {"torch tokens/s", "torch_tokens_per_s", Table::Format::kFixed1},
               {"torch ms/step", "torch_decode_ms_per_step", Table::Format::kFixed2},
               {"vs torch", "ratio", Table::Format::kFixed2},
               {"same tokens", "same_tokens", Table::Format::kText},
               {"note", "note", Table::Format::kText}});
  const std::vector<std::string> all_prompts = Prompts(data, *std::max_element(batches.begin(), batches.end()));
  for (int batch : batches) {
    const std::vector<std::string> prompts(all_prompts.begin(), all_prompts.begin() + batch);
    const std::string prompts_json = nlohmann::json(prompts).dump();
    nlohmann::json peer;
    if (torch) {
      const fs::path log = work / ("torch-b" + std::to_string(batch) + ".log");
      std::cerr << "infer: torch batch " << batch << " ... " << std::flush;
      STRATA_RETURN_IF_ERROR(LaunchJob({o.python, o.script,
                                        (work / "model.safetensors").string(), std::to_string(o.gpt.heads), prompts_json,
                                        std::to_string(o.new_tokens), "1"},
                                       log)
                                 .WithContext("PyTorch"));
      STRATA_ASSIGN_OR_RETURN(peer, LastJson(log.string(), "tokens_per_s"));
      std::cerr << "done\n";
    }
    for (int tp : tps) {
      const std::string tag = "b" + std::to_string(batch) + "-tp" + std::to_string(tp);
      std::vector<std::string> sets = {"infer.mode=generate", "infer.checkpoint=" + (work / "ckpt").string(),
                                       "infer.prompts=" + prompts_json, "infer.max_new_tokens=" + std::to_string(o.new_tokens),
                                       "infer.output_path=" + (work / (tag + "-out-{rank}.jsonl")).string(),
                                       "train.metrics_path=" + (work / (tag + "-m-{rank}.jsonl")).string()};
      std::vector<std::string> args;
      if (tp == 1) {
        args = {bin + "/strata-trainer", "-c", job.string()};
      } else {
        args = {bin + "/strata-launch", "--servers", "0", "--trainers", std::to_string(tp), job.string()};
        sets.insert(sets.end(), {"sync.mode=allreduce", "parallel.tp=" + std::to_string(tp)});
      }
      for (const std::string& s : sets) {
        args.push_back("--set");
        args.push_back(s);
      }
      std::cerr << "infer: " << tag << " ... " << std::flush;
      STRATA_RETURN_IF_ERROR(LaunchJob(args, work / (tag + ".log")).WithContext(tag));
      std::cerr << "done\n";
      STRATA_ASSIGN_OR_RETURN(const nlohmann::json rec, LastJson((work / (tag + "-m-0.jsonl")).string(), "generate"));
      const nlohmann::json& g = rec["generate"];
      const auto tokens = Tokens(work, tag + "-out-", prompts.size());
      std::string same = "-";
      if (torch) same = nlohmann::json(tokens) == peer["tokens"] ? "yes" : "NO";
      const double tps_strata = g["tokens_per_s"].get<double>();
      table.AddRow({batch, tp, tps_strata, g["decode_ms_per_step"].get<double>(), g["prefill_ms"].get<double>(),
                    torch ? peer["tokens_per_s"] : nlohmann::json(), torch ? peer["decode_ms_per_step"] : nlohmann::json(),
                    torch ? nlohmann::json(tps_strata / peer["tokens_per_s"].get<double>()) : nlohmann::json(), same,
                    static_cast<unsigned>(tp) > cpus ? "oversubscribed: " + std::to_string(tp) + " ranks on " +
                                                           std::to_string(cpus) + " cores"
                                                     : std::string()});
    }
  }
  Report report;
  report.tables.push_back(std::move(table));
  report.config = {{"model", o.gpt.ToJson()},
                   {"new_tokens", o.new_tokens}, {"batches", batches}, {"tp", tps}, {"cpus", cpus},
                   {"torch", torch}};
  report.notes = {
      "strata: infer.mode generate on a checkpoint of the model (one training step from its seeded init), "
      "greedy, OPENBLAS_NUM_THREADS=1; tp 1 one strata-trainer process, tp > 1 strata-launch with that many "
      "trainer processes. tokens/s: generated tokens (batch x steps) / the generation's wall time on "
      "rank 0 (prefill included); ms/step: each decode step after the prefill (a token for every row).",
      "torch: tools/bench/torch_gpt_infer.py, PyTorch eager with torch.set_num_threads(1), on the same "
      "weights exported by strata-ckpt export --format safetensors, the same algorithm (one prefill of "
      "the right-padded prompts, then one token a step per row at its own position into a [B, H, ctx, hd] "
      "cache); same tokens: every prompt's greedy tokens equal strata's.",
      torch ? std::string("PyTorch: python3-torch found at ") + o.python
            : "PyTorch column empty: " + o.python + " cannot import torch (apt-get install python3-torch)",
      HostLoadNote(cpus, total.Seconds())};
  FinishWorkDir(work, o.keep, &report.notes);
  return report;
}

}  // namespace

BenchFn SetupInferBench(CLI::App& app) {
  auto o = std::make_shared<Options>();
  AddGptShapeOptions(app, o->gpt);
  app.add_option("--new-tokens", o->new_tokens, "tokens generated after each prompt")->capture_default_str();
  app.add_option("--batches", o->batches, "prompts per generation, comma-separated")->capture_default_str();
  app.add_option("--tp", o->tps, "tensor-parallel ranks, comma-separated")->capture_default_str();
  app.add_option("--data", o->data, "text the prompts are cut from (a generated one when missing)")->capture_default_str();
  app.add_option("--python", o->python, "the Python with torch (Debian's python3-torch)")->capture_default_str();
  app.add_option("--script", o->script, "the PyTorch peer")->capture_default_str();
  app.add_flag("--keep", o->keep, "keep the work directory");
  return [o] { return RunInferBench(*o); };
}

}  // namespace strata::bench
