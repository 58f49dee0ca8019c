// action.cc: the text form of pipeline actions ("2F3", "0SEND_B1") and its parser.
#include "trainer/pipeline/action.h"

#include <array>
#include <charconv>

namespace strata::pipeline {
namespace {

constexpr std::array<std::string_view, 8> kKindNames = {"F",      "B",      "I",      "W",
                                                        "SEND_F", "RECV_F", "SEND_B", "RECV_B"};

// Reads a non-negative decimal number at the front of `text`, advancing past it.
std::optional<int> TakeNumber(std::string_view& text) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  // from_chars accepts a leading '-'; stage and micro-batch indices are never negative.
  if (ec != std::errc() || end == text.data() || text.front() == '-') return std::nullopt;
  text.remove_prefix(static_cast<size_t>(end - text.data()));
  return value;
}

Status BadAction(std::string_view text, std::string_view why) {
  return Status::InvalidArgument("bad pipeline action '" + std::string(text) +
                                 "': " + std::string(why) +
                                 " (expected <stage><kind><micro>, kind one of F B I W SEND_F "
                                 "RECV_F SEND_B RECV_B, e.g. 2F3)");
}

}  // namespace

std::string_view ActionKindName(ActionKind kind) { return kKindNames[static_cast<size_t>(kind)]; }

std::string ToString(const Action& a) {
  return std::to_string(a.stage) + std::string(ActionKindName(a.kind)) + std::to_string(a.micro);
}

Result<Action> ParseAction(std::string_view text) {
  std::string_view rest = text;
  const std::optional<int> stage = TakeNumber(rest);
  if (!stage) return BadAction(text, "no stage number (a non-negative int) at the start");
  // Longest name first is not needed: no name is a prefix of another.
  for (size_t k = 0; k < kKindNames.size(); ++k) {
    if (rest.substr(0, kKindNames[k].size()) != kKindNames[k]) continue;
    rest.remove_prefix(kKindNames[k].size());
    const std::optional<int> micro = TakeNumber(rest);
    if (!micro) return BadAction(text, "no micro-batch number (a non-negative int) after the kind");
    if (!rest.empty()) return BadAction(text, "trailing characters '" + std::string(rest) + "'");
    return Action{static_cast<ActionKind>(k), *stage, *micro};
  }
  return BadAction(text, "unknown kind");
}

std::string ToString(const std::vector<Action>& actions) {
  std::string out;
  for (const Action& a : actions) {
    if (!out.empty()) out += ' ';
    out += ToString(a);
  }
  return out;
}

Result<std::vector<Action>> ParseActions(std::string_view text) {
  std::vector<Action> actions;
  size_t at = 0;
  while (at < text.size()) {
    if (text[at] == ' ') {
      ++at;
      continue;
    }
    size_t end = text.find(' ', at);
    if (end == std::string_view::npos) end = text.size();
    STRATA_ASSIGN_OR_RETURN(Action a, ParseAction(text.substr(at, end - at)));
    actions.push_back(a);
    at = end;
  }
  return actions;
}

}  // namespace strata::pipeline
