// bench.h: the Subcommand interface of strata-bench and the set-up function of each
// subcommand (one .cc file each). bench_main.cc lists them.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "tools/bench/bench_util.h"

namespace CLI {
class App;
}

namespace strata::bench {

// Runs a configured benchmark and returns its figures (main prints them and writes --json).
using BenchFn = std::function<Result<Report>()>;

struct Subcommand {
  const char* name;
  const char* description;
  // Adds the subcommand's flags to `app` (bound to state the returned function captures).
  BenchFn (*setup)(CLI::App& app);
};

// transport_bench.cc: RPC round trips and one-way streams against raw ZeroMQ.
BenchFn SetupTransportBench(CLI::App& app);
// ps_bench.cc: dense and sparse push/pull against servers, beside raw ZeroMQ.
BenchFn SetupPsBench(CLI::App& app);
// store_bench.cc: the tiered row store, hot and cold, beside raw RocksDB.
BenchFn SetupStoreBench(CLI::App& app);
// ops_bench.cc: CPU GEMM beside OpenBLAS called directly, and the gpt block's ops.
BenchFn SetupOpsBench(CLI::App& app);
// allreduce_bench.cc: Communicator::AllReduce (Gloo backend) beside gloo::allreduce direct.
BenchFn SetupAllreduceBench(CLI::App& app);
// pipeline_bench.cc: pipeline schedules on real trainer processes: measured bubble beside the
// simulator's on the same measured costs, peak saved activations beside theory.
BenchFn SetupPipelineBench(CLI::App& app);
// zero_bench.cc: ZeRO stages 0, 1, 2 on real data-parallel trainer processes: step time, dp
// bytes per step measured beside theory, communication hidden behind backward, memory.
BenchFn SetupZeroBench(CLI::App& app);

// offload_bench.cc: gpt under allreduce, offload (serial and pipelined) and the delayed update:
// step time, push/pull hidden behind compute, trainer memory, loss.
BenchFn SetupOffloadBench(CLI::App& app);

// plan_bench.cc: the planner (issue #19): predicted beside measured step time and memory of
// its top plans and others, Spearman's rank correlation, median error, chosen vs best.
BenchFn SetupPlanBench(CLI::App& app);

// adam_bench.cc: the fused CPU Adam kernel in parameters/s beside the memory-bandwidth bound
// measured in the same run, each instruction-set path, and a plain scalar loop.
BenchFn SetupAdamBench(CLI::App& app);

// infer_bench.cc: gpt generation with a KV cache, tokens/s beside PyTorch eager on the same
// exported weights.
BenchFn SetupInferBench(CLI::App& app);

// step_bench.cc: gpt training steps of one trainer on the CPU or a GPU, beside PyTorch eager on
// the same shapes: step time, tokens/s, model FLOP/s and MFU.
BenchFn SetupStepBench(CLI::App& app);

// chaos_bench.cc: the fault campaign (issue #16): a ctr job through server and scheduler kills,
// trainer stops, a hostile client and delayed messages, beside an undisturbed run; and a
// ledger of counted pushes through server kills (updates lost, duplicates applied).
BenchFn SetupChaosBench(CLI::App& app);

// Shared by the subcommands that run real jobs (bench_jobs.cc).
// Runs the program `args` names (args[0]: its path; strata-launch, a trainer, a peer script) with
// OPENBLAS_NUM_THREADS=1 (a ChildProcess), its output to `log`, and waits for it; fails with the
// log's tail when it exits non-zero (128 + the signal that killed it).
Status LaunchJob(const std::vector<std::string>& args, const std::filesystem::path& log);
// `data` when that file exists, else a generated text file in `dir`.
Result<std::string> TextDataPath(const std::string& data, const std::filesystem::path& dir);
// What a subcommand that launches jobs works in: strata-launch beside this binary, a fresh
// /tmp/strata-bench-<name>-XXXXXX directory, the text data (TextDataPath) and job.yaml in it.
struct JobWorkDir {
  std::string launch;            // strata-launch's path
  std::filesystem::path work;    // the directory
  std::string data_path;
  std::filesystem::path job_path;
};
// `yaml` makes the job's text from the data path.
Result<JobWorkDir> MakeJobWorkDir(const std::string& name, const std::string& data,
                                  const std::function<std::string(const std::string& data_path)>& yaml);
// Removes the jobs' work directory, or (`keep`) leaves it and says where in `notes`.
void FinishWorkDir(const std::filesystem::path& work, bool keep, std::vector<std::string>* notes);

// A byte-level gpt's shape, as the subcommands that train or run one take it.
struct GptShape {
  int64_t layers = 4, width = 128, heads = 4, context = 128;
  // The job's `model` section in flow style: {kind: gpt, layers: .., vocab: ..}.
  std::string ModelYaml(int64_t vocab = 256) const;
  nlohmann::json ToJson(int64_t vocab = 256) const;  // for a report's config
};
// --layers, --width, --heads and --context, bound to `s` (its values are the defaults shown).
void AddGptShapeOptions(CLI::App& app, GptShape& s);
// Whether `python` exists and imports torch (a peer's precondition); its output to `log`.
bool PythonHasTorch(const std::string& python, const std::filesystem::path& log);

}  // namespace strata::bench
