// schedule_main.cc: strata-schedule, prints (and draws) a pipeline schedule without running it:
//   strata-schedule --schedule zb-h1 --pp 4 --micro-batches 8 [--costs 1,1,1] [--list]
//                   [--svg s.svg]
// The grid shows each rank's actions in time slots (the zero-bubble paper's figures), then
// the simulated bubble beside the textbook one and the peak live activations per rank.
#include <CLI/CLI.hpp>

#include <charconv>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "trainer/auto/pipeline_replay.h"
#include "trainer/pipeline/schedules.h"
#include "trainer/pipeline/simulate.h"
#include "trainer/pipeline/timeline.h"
#include "trainer/pipeline/timeline_svg.h"

namespace strata::pipeline {
namespace {

constexpr int kBadInput = 2;

int Fail(const std::string& message) {
  std::cerr << "strata-schedule: " << message << "\n";
  return kBadInput;
}

// "f,i,w[,comm]" into costs, B being I + W; nullopt unless 3 or 4 non-negative numbers.
std::optional<Costs> ParseCosts(const std::string& text) {
  std::vector<double> values;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    double v = -1;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || end != item.data() + item.size() || !(v >= 0)) return std::nullopt;
    values.push_back(v);
  }
  if (values.size() != 3 && values.size() != 4) return std::nullopt;
  Costs costs;
  costs.f = values[0];
  costs.i = values[1];
  costs.w = values[2];
  costs.b = costs.i + costs.w;
  costs.comm = values.size() == 4 ? values[3] : 0;
  return costs;
}

// Validate's messages start with the field; the flag that sets it is what a user can fix.
std::string FlagOf(const std::string& message) {
  if (message.rfind("micro_batches", 0) == 0) return "--micro-batches";
  if (message.rfind("vpp", 0) == 0) return "--vpp";
  return "--pp";
}

std::string Join(const std::vector<int>& values) {
  std::string out;
  for (int v : values) out += (out.empty() ? "" : " ") + std::to_string(v);
  return out;
}

int Run(int argc, char** argv) {
  CLI::App app{
      "strata-schedule: prints a pipeline schedule's actions per rank in time slots, its "
      "simulated and textbook bubble and its peak live activations; draws it as SVG"};
  std::string schedule_name = "1f1b", costs_text = "1,1,1", svg_path;
  PipelineShape shape;
  bool list = false;
  double slots = 0;
  int replay_copies = 0, replay_reps = 9;
  double replay_kib = 8;
  app.add_option("--schedule", schedule_name, "gpipe, 1f1b, interleaved, zb-h1 or zbv")
      ->capture_default_str();
  app.add_option("--pp", shape.pp, "pipeline ranks")->capture_default_str();
  CLI::Option* vpp = app.add_option("--vpp", shape.vpp,
                                    "stages per rank (default: 2 for interleaved and zbv, else 1)");
  app.add_option("--micro-batches", shape.micro_batches, "micro-batches per step")
      ->capture_default_str();
  app.add_option("--costs", costs_text,
                 "durations F,I,W[,comm] (B = I + W; comm: latency between ranks)")
      ->capture_default_str();
  app.add_option("--slots", slots,
                 "cores the ranks share (processor sharing, as the planner simulates a pipeline with "
                 "more processes than cores; 0: a core per rank)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--replay", replay_copies,
                 "also run the schedule on this host's cores: this many copies of the pipeline at once, "
                 "a thread per rank, each action spinning its cost in milliseconds of CPU time, each "
                 "hand-off a real send (shared memory); prints the measured step beside the simulated one")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--replay-reps", replay_reps, "timed replay steps (the median is printed)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--replay-kib", replay_kib, "bytes a hand-off moves in the replay, in KiB")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--svg", svg_path, "also write the timeline as an SVG picture to this file");
  app.add_flag("--list", list, "also print each rank's action list, sends and receives included");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return Fail(e.what());
  }

  auto kind = ParseScheduleKind(schedule_name);
  if (!kind.ok()) return Fail("--schedule: " + kind.status().message());
  if (vpp->count() == 0) {
    shape.vpp = *kind == ScheduleKind::kInterleaved || *kind == ScheduleKind::kZbv ? 2 : 1;
  }
  if (Status valid = Validate(*kind, shape); !valid.ok()) {
    return Fail(FlagOf(valid.message()) + ": " + valid.message());
  }
  std::optional<Costs> costs = ParseCosts(costs_text);
  if (!costs) {
    return Fail("--costs: expected F,I,W or F,I,W,comm (non-negative numbers), got '" + costs_text +
                "'");
  }

  costs->slots = slots;
  auto sim = Simulate(*kind, shape, *costs);
  if (!sim.ok()) {  // a builder bug, not the user's input
    std::cerr << "strata-schedule: " << sim.status().ToString() << "\n";
    return 1;
  }
  const std::string title =
      std::string(ScheduleKindName(*kind)) + "  pp=" + std::to_string(shape.pp) +
      " vpp=" + std::to_string(shape.vpp) + " micro-batches=" + std::to_string(shape.micro_batches);
  const Timeline timeline = ToTimeline(*sim, title);
  std::cout << RenderGrid(timeline);
  std::cout << "costs: F=" << costs->f << " I=" << costs->i << " W=" << costs->w
            << " (B=" << costs->b << ") comm=" << costs->comm
            << (slots > 0 ? " slots=" : "");
  if (slots > 0) std::cout << slots;
  std::cout << "; makespan " << sim->makespan
            << "\n";
  std::cout << "bubble: simulated " << sim->bubble << ", textbook " << TextbookBubble(*kind, shape)
            << " (textbook assumes F=I=W and comm=0)\n";
  std::cout << "peak live activations per rank (stage activations): " << Join(sim->peak_live)
            << "\n";
  if (list) {
    for (int r = 0; r < shape.pp; ++r) {
      auto actions = BuildActions(*kind, shape, r);
      if (!actions.ok()) return Fail(actions.status().ToString());
      std::cout << "rank " << r << ": " << ToString(*actions) << "\n";
    }
  }
  if (replay_copies > 0) {
    auto replay = PipelineReplay::Start(shape.pp, replay_copies, 1, 4u << 20);
    if (!replay.ok()) {
      std::cerr << "strata-schedule: " << replay.status().ToString() << "\n";
      return 1;
    }
    PipelineStepCosts step;
    step.compute = *costs;
    step.compute.comm = 0;
    step.compute.slots = 0;
    step.compute.f = costs->f * 1e-3;
    step.compute.b = costs->b * 1e-3;
    step.compute.i = costs->i * 1e-3;
    step.compute.w = costs->w * 1e-3;
    step.boundary_bytes.assign(static_cast<size_t>(shape.num_stages()), static_cast<int64_t>(replay_kib * 1024));
    auto seconds = (*replay)->Measure(*kind, shape, step, replay_reps);
    if (!seconds.ok()) {
      std::cerr << "strata-schedule: " << seconds.status().ToString() << "\n";
      return 1;
    }
    std::cout << "replay: " << replay_copies << " cop" << (replay_copies == 1 ? "y" : "ies") << " x " << shape.pp
              << " threads on this host, costs in ms: measured step " << *seconds * 1e3 << " ms (median of "
              << replay_reps << " back to back) against the simulated makespan " << sim->makespan << " ms\n";
  }
  if (!svg_path.empty()) {
    std::ofstream out(svg_path);
    out << RenderSvg({timeline});
    if (!out.flush()) {
      std::cerr << "strata-schedule: cannot write " << svg_path << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace strata::pipeline

int main(int argc, char** argv) { return strata::pipeline::Run(argc, argv); }
