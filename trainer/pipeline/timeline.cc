// timeline.cc: timelines from simulations, and the text grid.
#include "trainer/pipeline/timeline.h"

#include <algorithm>
#include <cmath>

namespace strata::pipeline {
namespace {

constexpr int kMaxColumns = 400;

bool IsMultiple(double t, double slot) {
  const double q = t / slot;
  return std::abs(q - std::round(q)) < 1e-6 * std::max(1.0, std::abs(q));
}

// The largest slot dividing every start and end: the shortest action's duration divided by a
// small integer (a comm latency of half a forward, say, needs half slots).
double PickSlot(const Timeline& timeline, const TimeSpan& span) {
  double shortest = 0;
  for (const TimelineRow& row : timeline.rows) {
    for (const TimedAction& a : row.actions) {
      const double d = a.end - a.start;
      if (d > 0 && (shortest == 0 || d < shortest)) shortest = d;
    }
  }
  const double fallback = (span.end - span.begin) / kMaxColumns;
  if (shortest == 0) return fallback > 0 ? fallback : 1;
  for (int divisor = 1; divisor <= 24; ++divisor) {
    const double slot = shortest / divisor;
    if ((span.end - span.begin) / slot > kMaxColumns) break;
    bool fits = true;
    for (const TimelineRow& row : timeline.rows) {
      for (const TimedAction& a : row.actions) {
        fits =
            fits && IsMultiple(a.start - span.begin, slot) && IsMultiple(a.end - span.begin, slot);
      }
    }
    if (fits) return slot;
  }
  return fallback;
}

}  // namespace

Timeline ToTimeline(const Simulation& sim, std::string title) {
  Timeline timeline{std::move(title), {}};
  for (size_t r = 0; r < sim.ranks.size(); ++r) {
    timeline.rows.push_back({"rank " + std::to_string(r), sim.ranks[r]});
  }
  return timeline;
}

TimeSpan SpanOf(const Timeline& timeline) {
  TimeSpan span;
  bool any = false;
  for (const TimelineRow& row : timeline.rows) {
    for (const TimedAction& a : row.actions) {
      span.begin = any ? std::min(span.begin, a.start) : a.start;
      span.end = any ? std::max(span.end, a.end) : a.end;
      any = true;
    }
  }
  return span;
}

std::string RenderGrid(const Timeline& timeline, double slot) {
  const TimeSpan span = SpanOf(timeline);
  if (slot <= 0) slot = PickSlot(timeline, span);
  const int columns = static_cast<int>(std::ceil((span.end - span.begin) / slot - 1e-6));
  std::vector<std::vector<std::string>> cells;
  size_t width = 1, label_width = 0;
  for (const TimelineRow& row : timeline.rows) {
    std::vector<std::string>& line = cells.emplace_back(static_cast<size_t>(columns), ".");
    for (const TimedAction& a : row.actions) {
      const int first = static_cast<int>(std::lround((a.start - span.begin) / slot));
      const int last = static_cast<int>(std::lround((a.end - span.begin) / slot));
      for (int c = std::max(first, 0); c < std::min(last, columns); ++c) {
        line[c] = c == first ? ToString(a.action) : "-";
      }
      width = std::max(width, ToString(a.action).size());
    }
    label_width = std::max(label_width, row.label.size());
  }
  std::string out;
  if (!timeline.title.empty()) out += timeline.title + "\n";
  for (size_t r = 0; r < cells.size(); ++r) {
    std::string line = timeline.rows[r].label;
    line.resize(label_width, ' ');
    line += " |";
    for (const std::string& cell : cells[r]) {
      line += ' ' + cell;
      line.append(width - cell.size(), ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace strata::pipeline
