// pipeline_timings.cc: see pipeline_timings.h.
#include "tools/bench/pipeline_timings.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

namespace strata::bench {

using pipeline::ScheduleKind;

double ActionSpread(const std::vector<std::vector<pipeline::TimedAction>>& ranks) {
  std::map<std::pair<int, int>, std::vector<double>> by_kind;
  for (const auto& rank : ranks) {
    for (const pipeline::TimedAction& t : rank) {
      by_kind[{static_cast<int>(t.action.kind), t.action.stage}].push_back(t.end - t.start);
    }
  }
  double sum = 0;
  int n = 0;
  for (const auto& [key, d] : by_kind) {
    if (d.size() < 2) continue;
    double mean = 0, var = 0;
    for (double x : d) mean += x / d.size();
    for (double x : d) var += (x - mean) * (x - mean) / (d.size() - 1);
    if (mean > 0) sum += std::sqrt(var) / mean, ++n;
  }
  return n ? sum / n : 0;
}

double HandoffLatency(const std::vector<std::vector<pipeline::TimedAction>>& ranks) {
  using pipeline::ActionKind;
  struct Run {
    int rank;
    double start, end;
  };
  // (forward?, stage, micro) -> where and when it ran; backward: B or I (they pass dx on).
  std::map<std::tuple<bool, int, int>, Run> runs;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    for (const pipeline::TimedAction& t : ranks[r]) {
      if (t.action.kind == ActionKind::kBackwardWeight) continue;
      runs[{t.action.kind == ActionKind::kForward, t.action.stage, t.action.micro}] = {r, t.start,
                                                                                       t.end};
    }
  }
  std::map<std::pair<int, int>, double> least;  // (producer rank, consumer rank) -> least gap
  for (const auto& [key, consumer] : runs) {
    const auto [forward, stage, micro] = key;
    const int from = forward ? stage - 1 : stage + 1;
    auto producer = runs.find({forward, from, micro});
    if (producer == runs.end() || producer->second.rank == consumer.rank) continue;
    const auto pair = std::make_pair(producer->second.rank, consumer.rank);
    const double gap = consumer.start - producer->second.end;
    auto [it, fresh] = least.emplace(pair, gap);
    if (!fresh) it->second = std::min(it->second, gap);
  }
  double sum = 0;
  int n = 0;
  for (const auto& [pair, gap] : least) {
    if (pair.first > pair.second) continue;
    auto back = least.find({pair.second, pair.first});
    if (back == least.end()) continue;
    sum += std::max(0.0, (gap + back->second) / 2);
    ++n;
  }
  return n ? sum / n : 0;
}

double UnforcedIdle(ScheduleKind kind, const pipeline::PipelineShape& shape,
                    const std::vector<std::vector<pipeline::TimedAction>>& ranks) {
  using pipeline::ActionKind;
  const int last = shape.num_stages() - 1;
  double idle = 0;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    double prev_end = 0;
    for (const pipeline::TimedAction& t : ranks[r]) {
      const pipeline::Action& a = t.action;
      int from = -1;  // the stage whose output this action takes
      if (a.kind == ActionKind::kForward && a.stage > 0) from = a.stage - 1;
      if ((a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardInput) &&
          a.stage < last) {
        from = a.stage + 1;
      }
      if (from < 0 || pipeline::RankOfStage(kind, shape, from) == r) {
        idle += std::max(0.0, t.start - prev_end);
      }
      prev_end = t.end;
    }
  }
  return idle;
}

}  // namespace strata::bench
