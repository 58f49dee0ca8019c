// timeline_test.cc: the text grid of a simulated schedule (golden) and the SVG drawing (one
// box per action, stacked timelines, escaped labels).
#include "trainer/pipeline/timeline.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "trainer/pipeline/timeline_svg.h"

namespace strata::pipeline {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

Timeline Simulated(ScheduleKind kind, const PipelineShape& shape, const Costs& costs = {}) {
  auto sim = Simulate(kind, shape, costs);
  EXPECT_TRUE(sim.ok()) << sim.status().ToString();
  return ToTimeline(*sim, std::string(ScheduleKindName(kind)));
}

TEST(TimelineTest, GoldenGridOneFOneB) {
  // F takes one slot, B two ("-" carries it on); '.' is the bubble.
  EXPECT_EQ(RenderGrid(Simulated(ScheduleKind::k1F1B, {2, 1, 4})),
            "1f1b\n"
            "rank 0 | 0F0 0F1 .   .   0B0 -   0F2 0B1 -   0F3 0B2 -   .   0B3 -\n"
            "rank 1 | .   1F0 1B0 -   1F1 1B1 -   1F2 1B2 -   1F3 1B3 -   .   .\n");
}

TEST(TimelineTest, GridUsesHalfSlotsForHalfLatency) {
  Costs costs;
  costs.comm = 0.5;
  const std::string grid = RenderGrid(Simulated(ScheduleKind::kGpipe, {2, 1, 1}, costs));
  // 0F0 [0,1) 1F0 [1.5,2.5) 1B0 [2.5,4.5) 0B0 [5,7): 14 half slots.
  EXPECT_THAT(grid, HasSubstr("rank 0 | 0F0 -   .   .   .   .   .   .   .   .   0B0 -   -   -\n"));
  EXPECT_THAT(grid, HasSubstr("rank 1 | .   .   .   1F0 -   1B0 -   -   -"));
}

TEST(TimelineTest, SpanStartsAtTheEarliestAction) {
  Timeline t{"measured",
             {{"rank 0", {{{ActionKind::kForward, 0, 0}, 1000.5, 1001.5}}},
              {"rank 1", {{{ActionKind::kForward, 1, 0}, 1001.5, 1003}}}}};
  const TimeSpan span = SpanOf(t);
  EXPECT_DOUBLE_EQ(span.begin, 1000.5);
  EXPECT_DOUBLE_EQ(span.end, 1003);
  EXPECT_EQ(RenderGrid(t, 0.5),
            "measured\nrank 0 | 0F0 -   .   .   .\nrank 1 | .   .   1F0 -   -\n");
  EXPECT_EQ(SpanOf(Timeline{}).end, 0);
}

TEST(TimelineTest, SvgHasOneBoxPerAction) {
  const Timeline planned = Simulated(ScheduleKind::kZbv, {4, 2, 8});
  Timeline measured = Simulated(ScheduleKind::kZbH1, {4, 1, 8});
  measured.title = "measured <zb-h1> & co";
  SvgOptions options;
  options.time_unit = "ms";
  const std::string svg = RenderSvg({planned, measured}, options);
  EXPECT_THAT(svg, StartsWith("<svg "));
  EXPECT_THAT(svg, HasSubstr("</svg>"));
  size_t actions = 0;
  for (const Timeline& t : {planned, measured}) {
    for (const TimelineRow& row : t.rows) actions += row.actions.size();
  }
  EXPECT_EQ(actions, 4u * 2 * 3 * 8 + 4u * 3 * 8);
  EXPECT_EQ(Count(svg, "<rect class=\"action\""), actions);
  EXPECT_EQ(Count(svg, "</rect>"), actions);
  EXPECT_EQ(Count(svg, "<text"), Count(svg, "</text>"));
  EXPECT_THAT(svg, HasSubstr("measured &lt;zb-h1&gt; &amp; co"));
  EXPECT_THAT(svg, HasSubstr("<title>7F3 ["));
  EXPECT_THAT(svg, HasSubstr(">ms</text>"));
  EXPECT_EQ(Count(svg, "<"), Count(svg, ">"));
}

TEST(TimelineTest, SvgOfNothingIsStillAPicture) {
  const std::string svg = RenderSvg({});
  EXPECT_THAT(svg, StartsWith("<svg "));
  EXPECT_EQ(Count(svg, "class=\"action\""), 0u);
}

}  // namespace
}  // namespace strata::pipeline
