// bench_main.cc: strata-bench, the benchmark program. Dispatches to one subcommand per
// benchmark; each prints a table and, with --json PATH, writes the same figures as JSON.
#include <CLI/CLI.hpp>

#include <iostream>
#include <string>
#include <vector>

#include "common/allocator.h"
#include "common/logging.h"
#include "tools/bench/bench.h"

namespace {

// Every subcommand: add a line here and a Setup function in bench.h.
const strata::bench::Subcommand kSubcommands[] = {
    {"transport", "RPC round-trip latency and one-way throughput beside raw ZeroMQ",
     strata::bench::SetupTransportBench},
    {"ps", "parameter-server push/pull (dense GB/s, sparse rows/s) beside raw ZeroMQ",
     strata::bench::SetupPsBench},
    {"store", "tiered row store (DRAM over RocksDB) beside raw RocksDB",
     strata::bench::SetupStoreBench},
    {"ops", "CPU GEMM beside OpenBLAS, and the gpt block's ops",
     strata::bench::SetupOpsBench},
    {"allreduce", "Communicator::AllReduce (Gloo) beside gloo::allreduce: time, algbw, busbw",
     strata::bench::SetupAllreduceBench},
    {"pipeline", "pipeline schedules on trainer processes: measured vs simulated bubble, activations",
     strata::bench::SetupPipelineBench},
    {"infer", "gpt generation with a KV cache: tokens/s and ms per step at tp 1 and 2, beside PyTorch eager",
     strata::bench::SetupInferBench},
    {"step", "gpt training steps of one trainer (CPU or GPU) beside PyTorch eager: step time, tokens/s, MFU",
     strata::bench::SetupStepBench},
    {"zero", "ZeRO stages 0-3 on dp trainers: step time, dp bytes vs theory, hidden comm, memory",
     strata::bench::SetupZeroBench},
    {"offload", "gpt under allreduce and offload (serial, pipelined, delayed): step time, hidden push/pull, memory",
     strata::bench::SetupOffloadBench},
    {"plan", "the planner (issue #19): predicted beside measured step time and memory of its top 3 and other plans on real trainer processes",
     strata::bench::SetupPlanBench},
    {"adam", "fused CPU Adam kernel: parameters/s beside the memory-bandwidth bound and a scalar loop",
     strata::bench::SetupAdamBench},
    {"chaos", "fault campaign: ctr through server/scheduler kills, stops, a hostile client, delays; a ledger of pushes",
     strata::bench::SetupChaosBench},
};

}  // namespace

int main(int argc, char** argv) {
  strata::TuneHostMallocForLargeBuffers();  // before any thread starts
  CLI::App app{"strata-bench: benchmarks of strata's layers, each beside a reference peer"};
  app.require_subcommand(1);
  app.fallthrough();  // --log-level may follow the subcommand
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off")
      ->capture_default_str();

  struct Entry {
    CLI::App* app;
    strata::bench::BenchFn run;
  };
  std::vector<Entry> entries;
  std::string json_path;
  for (const auto& sub : kSubcommands) {
    CLI::App* cmd = app.add_subcommand(sub.name, sub.description);
    cmd->add_option("--json", json_path, "also write the figures as JSON to this file");
    entries.push_back({cmd, sub.setup(*cmd)});
  }
  CLI11_PARSE(app, argc, argv);

  if (!strata::InitLogging({.role = "bench", .rank = -1, .level = log_level})) {
    std::cerr << "strata-bench: unknown log level \"" << log_level << "\"\n";
    return 2;
  }
  for (const Entry& entry : entries) {
    if (!entry.app->parsed()) continue;
    auto report = entry.run();
    if (!report.ok()) {
      std::cerr << "strata-bench " << entry.app->get_name() << ": " << report.status().ToString()
                << "\n";
      return 1;
    }
    report->benchmark = entry.app->get_name();
    report->Print(std::cout);
    if (!json_path.empty()) {
      strata::Status s = strata::bench::WriteJson(json_path, report->ToJson());
      if (!s.ok()) {
        std::cerr << "strata-bench: " << s.ToString() << "\n";
        return 1;
      }
    }
  }
  return 0;
}
