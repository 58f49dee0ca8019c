// step_bench.cc: strata-bench step: gpt training steps of one strata-trainer process (sync.mode
// local) on the CPU or a CUDA device, beside PyTorch eager training the same shapes in the same
// run (tools/bench/torch_gpt_train.py): step time, tokens/s, model FLOP/s and MFU against a
// peak: the one given (--peak-tflops: a GPU's datasheet figure), or on the CPU OpenBLAS's
// single-thread SGEMM rate measured here (what one core's GEMM can do, the trainers' bound).
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "common/dtype.h"
#include "tools/bench/bench.h"

namespace strata::bench {
namespace {

namespace fs = std::filesystem;

struct Options {
  std::string device = "cpu";
  GptShape gpt{4, 256, 4, 128};
  int64_t batch = 8, vocab = 256;
  int steps = 20, warmup = 5;
  std::string matmul_precision = "fp32";  // train.matmul_precision; the peer's --precision
  double peak_tflops = 0;  // 0: on the CPU, measure OpenBLAS SGEMM; on a GPU, no MFU column
  std::string data = "/usr/share/common-licenses/GPL-3";
  std::string python = "/usr/bin/python3";
  std::string script = STRATA_BENCH_SCRIPTS "/torch_gpt_train.py";
  bool keep = false;
};

// The job; its metrics path, in the work directory, is set on the trainer's command line
// (MakeJobWorkDir hands the job's text only the data path).
std::string JobYaml(const Options& o, const std::string& data) {
  std::ostringstream y;
  y << "model: " << o.gpt.ModelYaml(o.vocab) << "\n"
    // The smallest held-out tail the text source takes: the run evaluates once, at its end.
    << "data: {kind: text, path: " << data << ", eval_samples: " << o.gpt.context + 1 << "}\n"
    << "optimizer: {kind: adamw, lr: 0.0001, beta2: 0.95, weight_decay: 0.01}\n"
    << "train: {steps: " << o.steps << ", batch_size: " << o.batch << ", log_every: 1, progress: false, device: \""
    << o.device << "\", matmul_precision: " << o.matmul_precision
    // bf16: as the peer's autocast, the activations saved for backward in bf16 too.
    << ", precision: " << (o.matmul_precision == "bf16" ? "bf16" : "fp32") << "}\n"
    << "sync: {mode: local}\n";
  return y.str();
}

// The median time of the steps after the warm-up, from the metrics file's cumulative elapsed_s
// (one line a step).
Result<double> MedianStepSeconds(const fs::path& metrics, int warmup) {
  std::ifstream in(metrics);
  if (!in) return Status::NotFound("no metrics file " + metrics.string());
  std::map<int64_t, double> elapsed;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("elapsed_s") && j.contains("step")) {
      elapsed[j["step"].get<int64_t>()] = j["elapsed_s"].get<double>();
    }
  }
  std::vector<double> steps;
  for (auto it = elapsed.begin(); it != elapsed.end(); ++it) {
    auto next = std::next(it);
    if (next == elapsed.end()) break;
    if (next->first == it->first + 1 && it->first >= warmup) steps.push_back(next->second - it->second);
  }
  if (steps.empty()) return Status::Internal(metrics.string() + ": no step after the warm-up");
  return Median(steps);
}

// Model FLOPs of one token's forward and backward (PaLM's and nanoGPT's count): 6 per parameter
// outside the embeddings (which are lookups, not products: the blocks, the final norm, the head)
// and 12 L C T for attention's scores and weighted sum over the whole context.
double FlopsPerToken(const Options& o) {
  const double c = static_cast<double>(o.gpt.width), l = static_cast<double>(o.gpt.layers);
  const double weights = l * (12 * c * c + 13 * c) + 2 * c + c * static_cast<double>(o.vocab);
  return 6 * weights + 12 * l * c * static_cast<double>(o.gpt.context);
}

// The trainer's "model has N parameters" (0 when the log does not say).
int64_t ParamsInLog(const fs::path& log) {
  std::ifstream in(log);
  const std::string marker = "model has ";
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find(marker);
    if (at != std::string::npos) return std::atoll(line.c_str() + at + marker.size());
  }
  return 0;
}

// OpenBLAS's single-thread SGEMM rate at n = 1024 (median of 9 after a warm-up), in FLOP/s.
double SgemmFlops() {
  const int n = 1024;
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  openblas_set_num_threads(1);
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(),
                n);
  };
  run();
  std::vector<double> s;
  for (int r = 0; r < 9; ++r) {
    Stopwatch w;
    run();
    s.push_back(w.Seconds());
  }
  return 2.0 * n * n * n / Median(s);
}

Result<Report> RunStepBench(const Options& o) {
  STRATA_ASSIGN_OR_RETURN(const Device device, ParseDevice(o.device));
  if (o.warmup < 1 || o.steps <= o.warmup) return Status::InvalidArgument("--warmup must be at least 1 and below --steps");
  if (o.gpt.heads <= 0 || o.gpt.width % o.gpt.heads != 0) return Status::InvalidArgument("--heads must divide --width");
  STRATA_ASSIGN_OR_RETURN(const JobWorkDir dir, MakeJobWorkDir("step", o.data, [&](const std::string& data) {
                            return JobYaml(o, data);
                          }));
  const fs::path& work = dir.work;
  const std::string trainer = fs::path(dir.launch).parent_path().string() + "/strata-trainer";
  Stopwatch total;
  // The CPU's bound first, while nothing else of this run is on the cores.
  double peak = o.peak_tflops * 1e12;
  std::string peak_what = "--peak-tflops " + std::to_string(o.peak_tflops);
  if (peak <= 0 && !device.is_cuda()) {
    peak = SgemmFlops();
    peak_what = "OpenBLAS cblas_sgemm, 1 thread, n 1024, measured in this run";
  }

  std::cerr << "step: strata on " << o.device << " ... " << std::flush;
  STRATA_RETURN_IF_ERROR(LaunchJob({trainer, "-c", dir.job_path.string(), "--set",
                                    "train.metrics_path=" + (work / "metrics.jsonl").string()},
                                   work / "strata.log"));
  STRATA_ASSIGN_OR_RETURN(const double ours_s, MedianStepSeconds(work / "metrics.jsonl", o.warmup));
  const int64_t params = ParamsInLog(work / "strata.log");
  std::cerr << "done\n";

  const bool torch = PythonHasTorch(o.python, work / "torch-check.log");
  nlohmann::json peer;
  if (torch) {
    std::cerr << "step: PyTorch eager on " << o.device << " ... " << std::flush;
    std::vector<std::string> args = {o.python, o.script};
    const std::vector<std::pair<const char*, int64_t>> shape = {
        {"--layers", o.gpt.layers}, {"--width", o.gpt.width}, {"--heads", o.gpt.heads}, {"--context", o.gpt.context},
        {"--batch", o.batch},   {"--vocab", o.vocab}, {"--steps", o.steps}, {"--warmup", o.warmup}};
    for (const auto& [flag, value] : shape) args.insert(args.end(), {flag, std::to_string(value)});
    args.insert(args.end(), {"--device", o.device, "--precision", o.matmul_precision});
    if (!device.is_cuda()) args.insert(args.end(), {"--threads", "1"});  // as OPENBLAS_NUM_THREADS=1
    STRATA_RETURN_IF_ERROR(LaunchJob(args, work / "torch.log").WithContext("PyTorch"));
    STRATA_ASSIGN_OR_RETURN(peer, LastJson((work / "torch.log").string(), "step_ms"));
    std::cerr << "done\n";
    if (peer.value("params", int64_t{0}) != params) {
      return Status::Internal("the PyTorch peer's model has " + std::to_string(peer.value("params", int64_t{0})) +
                              " parameters, strata's " + std::to_string(params) + ": not the same shapes (" +
                              o.script + ")");
    }
  }

  const double tokens = static_cast<double>(o.batch * o.gpt.context);
  const double flops = FlopsPerToken(o) * tokens;
  Table table("strata-bench step: gpt training steps (forward, backward, AdamW) beside PyTorch eager",
              {{"run", "run", Table::Format::kText},
               {"step ms", "step_ms", Table::Format::kFixed2},
               {"tokens/s", "tokens_per_s", Table::Format::kFixed1},
               {"TFLOP/s", "model_tflops", Table::Format::kFixed3},
               {"MFU %", "mfu_pct", Table::Format::kFixed1},
               {"vs torch", "torch_over_ours", Table::Format::kFixed2}});
  auto row = [&](const std::string& name, double step_s, const nlohmann::json& ratio) {
    table.AddRow({name, step_s * 1e3, tokens / step_s, flops / step_s / 1e12,
                  peak > 0 ? nlohmann::json(100 * flops / step_s / peak) : nlohmann::json(), ratio});
  };
  const double torch_s = torch ? peer["step_ms"].get<double>() / 1e3 : 0;
  // vs torch: PyTorch's step time over ours (above 1: we are faster).
  row("strata", ours_s, torch ? nlohmann::json(torch_s / ours_s) : nlohmann::json());
  if (torch) {
    const std::string precision = peer.value("precision", std::string("fp32"));
    row("torch (" + peer["attention"].get<std::string>() + (precision == "bf16" ? ", bf16 autocast" : ", " + precision) + ")",
        torch_s, nlohmann::json(1.0));
  }

  Report report;
  report.tables.push_back(std::move(table));
  const unsigned cpus = std::thread::hardware_concurrency();
  report.config = {{"device", o.device},
                   {"model", o.gpt.ToJson(o.vocab)},
                   {"params", params}, {"batch", o.batch}, {"matmul_precision", o.matmul_precision}, {"steps", o.steps}, {"warmup", o.warmup}, {"flops_per_token", FlopsPerToken(o)},
                   {"peak_flops", peak}, {"peak", peak_what}, {"torch", torch ? peer : nlohmann::json()}, {"cpus", cpus}};
  report.notes = {
      "strata: one strata-trainer (sync.mode local, train.device " + o.device +
          ", fp32 tensors, train.matmul_precision " + o.matmul_precision +
          (o.matmul_precision == "bf16" ? " and train.precision bf16 (the activations saved for backward in bf16)" : "") +
          ", OPENBLAS_NUM_THREADS=1) on a byte-level text; step ms: the median over steps " +
          std::to_string(o.warmup + 1) + ".." + std::to_string(o.steps) +
          " of the wall time between consecutive metrics lines (data, forward, backward, AdamW, the line).",
      "torch: tools/bench/torch_gpt_train.py, the same architecture and shapes on random tokens, AdamW, the "
      "median of the same steps; --precision " + o.matmul_precision +
          " (fp32: fp32 matmuls; tf32: TF32 allowed; bf16: autocast to bf16, since PyTorch on CUDA has no bf16 "
          "multiply of fp32 tensors); on the CPU torch.set_num_threads(1).",
      "TFLOP/s: model FLOPs (6 per parameter outside the embeddings per token, plus 12 L C T for attention; " +
          std::to_string(static_cast<int64_t>(FlopsPerToken(o))) +
          " per token) over the step time; MFU: over the peak (" + peak_what + ").",
      torch ? "PyTorch " + peer["torch"].get<std::string>() + " at " + o.python
            : "PyTorch rows empty: " + o.python + " cannot import torch",
      HostLoadNote(cpus, total.Seconds())};
  FinishWorkDir(work, o.keep, &report.notes);
  return report;
}

}  // namespace

BenchFn SetupStepBench(CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--device", o->device, "cpu or cuda[:N] (train.device)")->capture_default_str();
  AddGptShapeOptions(app, o->gpt);
  app.add_option("--batch", o->batch, "sequences per step")->capture_default_str();
  app.add_option("--vocab", o->vocab, "gpt vocabulary (the text is bytes; a larger one costs its head)")
      ->capture_default_str();
  app.add_option("--steps", o->steps, "training steps per run")->capture_default_str();
  app.add_option("--warmup", o->warmup, "first steps left out")->capture_default_str();
  app.add_option("--matmul-precision", o->matmul_precision,
                 "fp32, tf32 or bf16: strata's train.matmul_precision and the PyTorch peer's --precision (cuda)")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}))
      ->capture_default_str();
  app.add_option("--peak-tflops", o->peak_tflops,
                 "the device's peak for MFU (an H100/H200's bf16 dense: 989); 0: on the CPU, measured SGEMM")
      ->capture_default_str();
  app.add_option("--data", o->data, "text to train on (a generated one when missing)")->capture_default_str();
  app.add_option("--python", o->python, "the Python with torch")->capture_default_str();
  app.add_option("--script", o->script, "the PyTorch peer")->capture_default_str();
  app.add_flag("--keep", o->keep, "keep the work directory");
  return [o] { return RunStepBench(*o); };
}

}  // namespace strata::bench
