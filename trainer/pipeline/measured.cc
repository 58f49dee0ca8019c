// measured.cc: GatherTimelines, MeasuredCosts, ChromeTrace, WritePipelineTimeline.
#include "trainer/pipeline/measured.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "trainer/pipeline/timeline.h"
#include "trainer/pipeline/timeline_svg.h"

namespace strata::pipeline {
namespace {

constexpr size_t kFloatsPerAction = 5;  // kind, stage, micro, start, end

}  // namespace

Result<std::vector<std::vector<TimedAction>>> GatherTimelines(Communicator* pp,
                                                              const std::vector<TimedAction>& mine) {
  if (!pp) return std::vector<std::vector<TimedAction>>{mine};
  const int n = pp->size();
  float count = static_cast<float>(mine.size());
  std::vector<float> counts(n);
  STRATA_RETURN_IF_ERROR(pp->AllGather(&count, counts.data(), 1).WithContext("gathering the timeline"));
  const size_t most = static_cast<size_t>(*std::max_element(counts.begin(), counts.end()));
  // Times are microseconds since each rank's step began: a float holds them to well under a
  // microsecond for steps shorter than a few seconds.
  std::vector<float> packed(most * kFloatsPerAction, 0.0f), all(n * most * kFloatsPerAction);
  for (size_t i = 0; i < mine.size(); ++i) {
    const TimedAction& t = mine[i];
    float* f = &packed[i * kFloatsPerAction];
    f[0] = static_cast<float>(t.action.kind);
    f[1] = static_cast<float>(t.action.stage);
    f[2] = static_cast<float>(t.action.micro);
    f[3] = static_cast<float>(t.start);
    f[4] = static_cast<float>(t.end);
  }
  if (most > 0) {
    STRATA_RETURN_IF_ERROR(pp->AllGather(packed.data(), all.data(), packed.size()).WithContext("gathering the timeline"));
  }
  std::vector<std::vector<TimedAction>> out(n);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < static_cast<size_t>(counts[r]); ++i) {
      const float* f = &all[(r * most + i) * kFloatsPerAction];
      TimedAction t;
      t.action = {static_cast<ActionKind>(static_cast<int>(f[0])), static_cast<int>(f[1]), static_cast<int>(f[2])};
      t.start = f[3];
      t.end = f[4];
      out[r].push_back(t);
    }
  }
  return out;
}

Costs MeasuredCosts(const std::vector<std::vector<TimedAction>>& ranks, int num_stages) {
  struct Mean {
    double sum = 0;
    int n = 0;
    double get(double fallback) const { return n ? sum / n : fallback; }
  };
  std::vector<Mean> f(num_stages), b(num_stages), i(num_stages), w(num_stages);
  for (const auto& rank : ranks) {
    for (const TimedAction& t : rank) {
      if (t.action.stage < 0 || t.action.stage >= num_stages) continue;
      std::vector<Mean>* m = nullptr;
      switch (t.action.kind) {
        case ActionKind::kForward: m = &f; break;
        case ActionKind::kBackward: m = &b; break;
        case ActionKind::kBackwardInput: m = &i; break;
        case ActionKind::kBackwardWeight: m = &w; break;
        default: break;
      }
      if (m) {
        (*m)[t.action.stage].sum += t.end - t.start;
        ++(*m)[t.action.stage].n;
      }
    }
  }
  Costs c;
  for (int s = 0; s < num_stages; ++s) {
    const double fs = f[s].get(1), is = i[s].get(fs), ws = w[s].get(fs);
    c.f_stage.push_back(fs);
    c.i_stage.push_back(is);
    c.w_stage.push_back(ws);
    c.b_stage.push_back(b[s].get(is + ws));
  }
  return c;
}

Costs ActionCosts(const std::vector<std::vector<TimedAction>>& ranks, int num_stages) {
  Costs c = MeasuredCosts(ranks, num_stages);
  for (const auto& rank : ranks) {
    for (const TimedAction& t : rank) {
      if (t.action.is_compute()) c.each[{static_cast<int>(t.action.kind), t.action.stage, t.action.micro}] = t.end - t.start;
    }
  }
  return c;
}

std::string ChromeTrace(const std::vector<std::vector<TimedAction>>& ranks) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t r = 0; r < ranks.size(); ++r) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", r}, {"args", {{"name", "pipeline rank " + std::to_string(r)}}}});
    for (const TimedAction& t : ranks[r]) {
      events.push_back({{"name", ToString(t.action)}, {"cat", std::string(ActionKindName(t.action.kind))},
                        {"ph", "X"}, {"pid", r}, {"tid", 0}, {"ts", t.start}, {"dur", t.end - t.start}});
    }
  }
  return nlohmann::json{{"traceEvents", events}}.dump();
}

Status WritePipelineTimeline(const std::string& base, ScheduleKind kind, const PipelineShape& shape,
                             const std::vector<std::vector<TimedAction>>& ranks, int64_t step) {
  {
    std::ofstream out(base + ".json", std::ios::trunc);
    out << ChromeTrace(ranks);
    if (!out) return Status::IOError("cannot write " + base + ".json");
  }
  Timeline measured{"measured: step " + std::to_string(step) + " (microseconds)", {}};
  for (size_t r = 0; r < ranks.size(); ++r) measured.rows.push_back({"rank " + std::to_string(r), ranks[r]});
  std::vector<Timeline> pictures;
  Result<Simulation> sim = Simulate(kind, shape, MeasuredCosts(ranks, shape.num_stages()));
  if (sim.ok()) {
    Timeline planned{"planned: " + std::string(ScheduleKindName(kind)) + ", simulated with the measured costs", {}};
    for (size_t r = 0; r < sim->ranks.size(); ++r) planned.rows.push_back({"rank " + std::to_string(r), sim->ranks[r]});
    pictures.push_back(std::move(planned));
  }
  pictures.push_back(std::move(measured));
  std::ofstream svg(base + ".svg", std::ios::trunc);
  svg << RenderSvg(pictures);
  if (!svg) return Status::IOError("cannot write " + base + ".svg");
  return Status::OK();
}

}  // namespace strata::pipeline
