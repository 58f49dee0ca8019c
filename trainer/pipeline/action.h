// action.h: Action, one step of a pipeline schedule on one rank (compute a micro-batch's
// forward or backward through one stage, or move an activation or gradient between ranks),
// and its text form ("2F3": stage 2, forward, micro-batch 3), after PyTorch pipelining.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace strata::pipeline {

// What an action does. Stages are global (0 .. pp * vpp - 1, in model order); a rank holds
// vpp of them (see Placement in schedules.h).
enum class ActionKind : uint8_t {
  kForward,         // "F": forward of the stage; on the last stage also the loss
  kBackward,        // "B": full backward (dL/dx and dL/dW together)
  kBackwardInput,   // "I": dL/dx only (the zero-bubble split); its W follows later
  kBackwardWeight,  // "W": dL/dW of a micro-batch whose I has run
  kSendF,           // "SEND_F": the stage's output activation to the next stage's rank
  kRecvF,           // "RECV_F": the stage's input activation from the previous stage's rank
  kSendB,           // "SEND_B": the stage's input gradient to the previous stage's rank
  kRecvB,           // "RECV_B": the stage's output gradient from the next stage's rank
};

struct Action {
  ActionKind kind = ActionKind::kForward;
  int stage = 0;  // global stage index; for sends and receives, the stage on this rank
  int micro = 0;  // micro-batch index within the step

  bool is_compute() const { return kind <= ActionKind::kBackwardWeight; }
  friend bool operator==(const Action&, const Action&) = default;
};

std::string_view ActionKindName(ActionKind kind);  // "F", "B", "I", "W", "SEND_F", ...
std::string ToString(const Action& a);               // "<stage><kind><micro>", e.g. "1SEND_F3"
// Parses ToString's form; InvalidArgument naming the text otherwise.
Result<Action> ParseAction(std::string_view text);
// Space-separated actions, as ToString writes them one after another.
std::string ToString(const std::vector<Action>& actions);

// The point-to-point tag of a hand-off to `stage` (the receiving stage) for micro-batch `micro`
// of `micro_batches`: activations even, gradients odd. The executor and the planner's replay
// both match sends to receives by it.
inline uint32_t HandoffTag(bool forward, int stage, int micro, int micro_batches) {
  return 2u * static_cast<uint32_t>(stage * micro_batches + micro) + (forward ? 0u : 1u);
}
// Parses that form back (any run of spaces separates actions); InvalidArgument naming the
// first bad action.
Result<std::vector<Action>> ParseActions(std::string_view text);

}  // namespace strata::pipeline
