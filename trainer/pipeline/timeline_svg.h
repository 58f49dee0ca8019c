// timeline_svg.h: draws one or more pipeline timelines (timeline.h) as an SVG picture, stacked
// with their titles: a row per rank, a box per action coloured by kind (F, B, I, W) with the
// micro-batch number inside and the action's text and times as its tooltip, a time axis under
// each timeline. Plain text out, no dependency: open it in a browser.
#pragma once

#include <string>
#include <vector>

#include "trainer/pipeline/timeline.h"

namespace strata::pipeline {

struct SvgOptions {
  // Width of the time axis in pixels (labels come on top of it). Wider shows shorter actions'
  // numbers; 1200 fits a screen.
  double width = 1200;
  double row_height = 22;
  // true: every timeline on one time scale, so a plan and a measurement in the same unit can
  // be compared by eye (the shorter one ends early); false: each fills the width, for
  // timelines in different units.
  bool shared_scale = true;
  // Written after the axis numbers ("ms"); empty for the simulator's cost units.
  std::string time_unit;
};

// The picture, "<svg ...>...</svg>". Each action is exactly one <rect class="action">, so
// tools and tests can count them. Each timeline's axis starts at its earliest action
// (SpanOf), so measured wall-clock times need no shifting.
std::string RenderSvg(const std::vector<Timeline>& timelines, const SvgOptions& options = {});

}  // namespace strata::pipeline
