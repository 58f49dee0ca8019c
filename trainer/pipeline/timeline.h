// timeline.h: a timeline of pipeline actions (a row per rank, each action with its start and
// end), planned by the simulator or measured by a trace, and its text form: the grid of the
// zero-bubble paper's figures, one column per time slot. timeline_svg.h draws it.
#pragma once

#include <string>
#include <vector>

#include "trainer/pipeline/simulate.h"

namespace strata::pipeline {

struct TimelineRow {
  std::string label;                 // "rank 0"
  std::vector<TimedAction> actions;  // in start order; times in any one unit per timeline
};

struct Timeline {
  std::string title;
  std::vector<TimelineRow> rows;
};

// The simulated timeline, one row per rank labelled "rank <r>".
Timeline ToTimeline(const Simulation& sim, std::string title);

// Earliest start and latest end over all rows ({0, 0} when empty). Drawings start their time
// axis at `begin`, so a measured trace on a wall clock lines up with a plan that starts at 0.
struct TimeSpan {
  double begin = 0, end = 0;
};
TimeSpan SpanOf(const Timeline& timeline);

// The timeline as text: the title, then one line per row, "<label> | " and one cell per
// `slot` of time: the action's text ("0F3") in the slot where it starts, "-" in the further
// slots it covers, "." where the row is idle. slot <= 0 picks the largest slot that divides
// every start and end (the unit cost of a simulation), or 1/400 of the span if that is finer.
std::string RenderGrid(const Timeline& timeline, double slot = 0);

}  // namespace strata::pipeline
