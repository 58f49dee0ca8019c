// timeline_svg.cc: the SVG drawing of timelines.
#include "trainer/pipeline/timeline_svg.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>

namespace strata::pipeline {
namespace {

constexpr double kMargin = 10;
constexpr double kCharWidth = 7;  // of the 12px sans-serif labels, roughly
constexpr double kTitleHeight = 24;
constexpr double kAxisHeight = 30;
constexpr double kGap = 16;

// Colours after the zero-bubble paper's figures: forward blue, backward warm, weight green.
const char* Colour(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return "#8cb7e3";
    case ActionKind::kBackward:
      return "#f2a45f";
    case ActionKind::kBackwardInput:
      return "#f6d270";
    case ActionKind::kBackwardWeight:
      return "#93d193";
    default:
      return "#cccccc";
  }
}

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A round tick step (1, 2 or 5 times a power of ten) giving about ten ticks over `span`.
double TickStep(double span) {
  const double raw = span / 10;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0}) {
    if (f * power >= raw) return f * power;
  }
  return 10 * power;
}

// Removes the trailing zeros of a tick label ("2.50" -> "2.5", "3.00" -> "3").
std::string Number(double v) {
  std::string s = fmt::format("{:.3f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

struct Layout {
  double left;   // x of time zero
  double scale;  // pixels per time unit
  double row_height;
};

// Draws one timeline with its top at `y`; returns the y below it.
double DrawTimeline(const Timeline& t, const TimeSpan& span, const Layout& at, const SvgOptions& o,
                    double y, std::string& out) {
  out +=
      fmt::format("<text x=\"{}\" y=\"{:.1f}\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
                  kMargin, y + 16, Escape(t.title));
  y += kTitleHeight;
  const double box = at.row_height - 4;
  for (const TimelineRow& row : t.rows) {
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" font-size=\"12\">{}</text>\n", kMargin,
                       y + at.row_height / 2 + 4, Escape(row.label));
    for (const TimedAction& a : row.actions) {
      const double x = at.left + (a.start - span.begin) * at.scale;
      const double w = std::max((a.end - a.start) * at.scale, 0.5);
      out += fmt::format(
          "<rect class=\"action\" x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" "
          "fill=\"{}\" stroke=\"#444\" stroke-width=\"0.5\"><title>{} [{}, {})</title></rect>\n",
          x, y + 2, w, box, Colour(a.action.kind), ToString(a.action), Number(a.start),
          Number(a.end));
      const std::string micro = std::to_string(a.action.micro);
      if (w >= kCharWidth * micro.size() + 2) {
        out += fmt::format(
            "<text x=\"{:.2f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"middle\">{}</text>\n",
            x + w / 2, y + at.row_height / 2 + 4, micro);
      }
    }
    y += at.row_height;
  }
  // The time axis: a line and round ticks, labelled from the timeline's own start.
  const double length = span.end - span.begin;
  out += fmt::format(
      "<line x1=\"{:.2f}\" y1=\"{:.1f}\" x2=\"{:.2f}\" y2=\"{:.1f}\" stroke=\"#444\"/>\n", at.left,
      y + 2, at.left + length * at.scale, y + 2);
  if (length > 0) {
    const double step = TickStep(length);
    for (int k = 0; k * step <= length * (1 + 1e-9); ++k) {
      const double x = at.left + k * step * at.scale;
      out += fmt::format(
          "<line x1=\"{0:.2f}\" y1=\"{1:.1f}\" x2=\"{0:.2f}\" y2=\"{2:.1f}\" stroke=\"#444\"/>\n",
          x, y + 2, y + 6);
      out += fmt::format(
          "<text x=\"{:.2f}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"middle\">{}</text>\n", x,
          y + 17, Number(k * step));
    }
    if (!o.time_unit.empty()) {
      out += fmt::format("<text x=\"{:.2f}\" y=\"{:.1f}\" font-size=\"10\">{}</text>\n",
                         at.left + length * at.scale + 8, y + 17, Escape(o.time_unit));
    }
  }
  return y + kAxisHeight;
}

}  // namespace

std::string RenderSvg(const std::vector<Timeline>& timelines, const SvgOptions& options) {
  size_t label_chars = 0;
  double longest = 0;
  std::vector<TimeSpan> spans;
  for (const Timeline& t : timelines) {
    for (const TimelineRow& row : t.rows) label_chars = std::max(label_chars, row.label.size());
    spans.push_back(SpanOf(t));
    longest = std::max(longest, spans.back().end - spans.back().begin);
  }
  const double left = kMargin + kCharWidth * label_chars + 10;
  // A legend once at the top: the four compute kinds.
  std::string body;
  double y = kMargin;
  double x = left;
  for (ActionKind kind : {ActionKind::kForward, ActionKind::kBackward, ActionKind::kBackwardInput,
                          ActionKind::kBackwardWeight}) {
    static const char* const kNames[] = {"F forward", "B backward", "I input grad",
                                         "W weight grad"};
    const char* name = kNames[static_cast<int>(kind)];
    body += fmt::format(
        "<rect class=\"legend\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"14\" height=\"14\" "
        "fill=\"{}\" stroke=\"#444\" stroke-width=\"0.5\"/>\n",
        x, y, Colour(kind));
    body += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"12\">{}</text>\n", x + 18,
                        y + 11, name);
    x += 120;
  }
  y += 14 + kGap;
  for (size_t k = 0; k < timelines.size(); ++k) {
    const double length = options.shared_scale ? longest : spans[k].end - spans[k].begin;
    const Layout layout{left, length > 0 ? options.width / length : 1.0, options.row_height};
    y = DrawTimeline(timelines[k], spans[k], layout, options, y, body) + kGap;
  }
  const double width = left + options.width + 60;
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" "
      "viewBox=\"0 0 {0:.0f} {1:.0f}\" font-family=\"sans-serif\">\n"
      "<rect class=\"background\" width=\"100%\" height=\"100%\" fill=\"white\"/>\n{2}</svg>\n",
      width, y, body);
}

}  // namespace strata::pipeline
