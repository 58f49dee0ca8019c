// comm_model.cc: ModelCommTraffic, one function per mesh dimension.
#include "trainer/parallel/comm_model.h"

#include <algorithm>

#include "common/check.h"
#include "trainer/pipeline/schedules.h"

namespace strata {
namespace {

constexpr uint64_t kFloat = sizeof(float);
constexpr uint64_t kDouble = sizeof(double);

void Add(std::array<uint64_t, kNumCommOps>& bytes, CommOp op, uint64_t n) {
  bytes[static_cast<size_t>(op)] += n;
}

// Rows of a micro-batch: the leading dimensions' product (samples, or tokens for gpt).
uint64_t Rows(const CommLayout& l) {
  uint64_t n = 1;
  for (int64_t d : l.micro_batch) n *= static_cast<uint64_t>(d);
  return n;
}

// Floats of unit `unit`'s output for one micro-batch on this rank (a slice of the sequence
// under sequence parallelism).
uint64_t OutputFloats(const CommLayout& l, int unit) {
  const UnitSpec& spec = l.units.at(static_cast<size_t>(unit));
  return static_cast<uint64_t>(spec.out_width) * Rows(l) / static_cast<uint64_t>(spec.seq_parts);
}

// The rank's schedule, action by action: an activation crosses a boundary forward after the
// stage's last unit (SEND_F on this side, RECV_F on the next), its gradient comes back the
// same size (SEND_B / RECV_B).
void AddPipelineTraffic(const CommLayout& l, GroupTraffic* pp) {
  if (l.plan.pp < 2) return;
  Result<std::vector<pipeline::Action>> actions =
      pipeline::BuildActions(l.plan.schedule, l.plan.shape(), l.pp_rank);
  STRATA_CHECK(actions.ok()) << actions.status().ToString();  // the plan was validated
  for (const pipeline::Action& a : *actions) {
    const UnitRange& units = l.plan.stages.at(static_cast<size_t>(a.stage));
    switch (a.kind) {
      case pipeline::ActionKind::kSendF:
        Add(pp->per_step, CommOp::kSend, OutputFloats(l, units.last - 1) * kFloat);
        break;
      case pipeline::ActionKind::kRecvB:
        Add(pp->per_step, CommOp::kRecv, OutputFloats(l, units.last - 1) * kFloat);
        break;
      case pipeline::ActionKind::kRecvF:
        Add(pp->per_step, CommOp::kRecv, OutputFloats(l, units.first - 1) * kFloat);
        break;
      case pipeline::ActionKind::kSendB:
        Add(pp->per_step, CommOp::kSend, OutputFloats(l, units.first - 1) * kFloat);
        break;
      default:
        break;  // compute
    }
  }
  // The step's loss (summed over the pipeline) and squared gradient norm (clipping).
  Add(pp->per_step, CommOp::kHostAllReduce, 2 * kDouble);
}

// ZeRO-3's all-gathers in a step: the schedule's F and B actions walk the units (pp 1), and a
// visit to a unit whose parameters are freed gathers them.
uint64_t Zero3GatherFloats(const CommLayout& l) {
  Result<std::vector<pipeline::Action>> actions =
      pipeline::BuildComputeActions(l.plan.schedule, l.plan.shape(), l.pp_rank);
  STRATA_CHECK(actions.ok()) << actions.status().ToString();
  const auto& floats = l.zero3_unit_floats;
  const int units = static_cast<int>(floats.size());
  int last = -1;  // the last unit with parameters: kept from its forward to its backward
  for (int u = 0; u < units; ++u) {
    if (floats[static_cast<size_t>(u)] > 0) last = u;
  }
  std::vector<bool> gathered(floats.size(), false);
  uint64_t total = 0;
  auto visit = [&](int u, bool forward) {
    const auto k = static_cast<size_t>(u);
    if (floats[k] == 0) return;
    if (!gathered[k]) total += static_cast<uint64_t>(floats[k]);
    gathered[k] = forward && u == last;
  };
  for (const pipeline::Action& a : *actions) {
    if (a.kind == pipeline::ActionKind::kForward) {
      for (int u = 0; u < units; ++u) visit(u, true);
    } else if (a.kind == pipeline::ActionKind::kBackward) {
      for (int u = units - 1; u >= 0; --u) visit(u, false);
    }
  }
  return total;
}

void AddDataParallelTraffic(const CommLayout& l, GroupTraffic* dp) {
  if (!l.dp_all_reduce) return;
  if (l.zero == 3) {
    Add(dp->per_step, CommOp::kReduceScatter, static_cast<uint64_t>(l.zero_padded_floats) * kFloat);
    Add(dp->per_step, CommOp::kAllGather, Zero3GatherFloats(l) * kFloat);
    Add(dp->per_step, CommOp::kHostAllReduce, 2 * kDouble + kDouble);  // gradient norms, the loss
    return;
  }
  int64_t floats = 0;
  for (int s : pipeline::StagesOfRank(l.plan.schedule, l.plan.shape(), l.pp_rank)) {
    const UnitRange& r = l.plan.stages.at(static_cast<size_t>(s));
    for (int u = r.first; u < r.last; ++u) floats += l.units.at(static_cast<size_t>(u)).params;
  }
  floats -= l.server_floats;
  if (l.zero > 0) {
    Add(dp->per_step, CommOp::kReduceScatter, static_cast<uint64_t>(l.zero_padded_floats) * kFloat);
    Add(dp->per_step, CommOp::kAllGather, static_cast<uint64_t>(l.zero_padded_floats) * kFloat);
    Add(dp->per_step, CommOp::kHostAllReduce, 2 * kDouble);  // the shards' squared gradient norms
    if (l.overlap) {
      Add(dp->first_step, CommOp::kReduceScatter, static_cast<uint64_t>(l.zero_first_padded_floats) * kFloat);
    }
  } else {
    Add(dp->per_step, CommOp::kAllReduce, static_cast<uint64_t>(floats) * kFloat);
  }
  Add(dp->per_step, CommOp::kHostAllReduce, kDouble);  // the loss, averaged over the replicas
  if (l.overlap) {
    Add(dp->first_step, CommOp::kHostBroadcast,
        static_cast<uint64_t>(l.all_reduced_tensors) * kFloat);
  }
}

// Floats a row (a token of the whole sequence, or a sample) of one unit moves over tp in its
// forward and in its backward (dL/dx), by op, as the models split their layers (gpt.cc, mlp.cc;
// layers.cc says where each collective is).
struct OpFloats {
  uint64_t all_reduce = 0, all_gather = 0, reduce_scatter = 0;
  OpFloats& operator+=(const OpFloats& o) {
    all_reduce += o.all_reduce;
    all_gather += o.all_gather;
    reduce_scatter += o.reduce_scatter;
    return *this;
  }
};
struct TpFloats {
  OpFloats forward, backward;
};

TpFloats UnitTpFloats(const CommLayout& l, int unit) {
  const ModelOptions& m = l.model;
  const int last = static_cast<int>(l.units.size()) - 1;
  const bool seq = l.sequence_parallel;
  switch (m.kind) {
    case ModelOptions::Kind::kGpt: {
      const auto c = static_cast<uint64_t>(m.width);
      // Sequence-parallel, a row layer's all-reduce becomes a reduce-scatter (forward) and its
      // dL/dy an all-gather (backward); a column layer's input an all-gather (forward) and its
      // dL/dx a reduce-scatter (backward).
      const OpFloats row_out = seq ? OpFloats{0, 0, c} : OpFloats{c, 0, 0};
      const OpFloats row_dy = seq ? OpFloats{0, c, 0} : OpFloats{};
      const OpFloats col_in = seq ? OpFloats{0, c, 0} : OpFloats{};
      const OpFloats col_dx = seq ? OpFloats{0, 0, c} : OpFloats{c, 0, 0};
      if (unit == 0) return {row_out, row_dy};  // the vocab-parallel embedding's rows
      if (unit == last) return {col_in, col_dx};  // the head (columns); ln_f is whole
      // A block: qkv and fc1 (columns), attention's proj and the MLP's fc2 (rows).
      TpFloats f{col_in, col_dx};
      f.forward += col_in;
      f.backward += col_dx;
      f.forward += row_out;
      f.forward += row_out;
      f.backward += row_dy;
      f.backward += row_dy;
      return f;
    }
    case ModelOptions::Kind::kMlp:
      // fc2 (rows) all-reduces its output; fc1 (columns) takes the data, so it computes no
      // dL/dx and all-reduces nothing.
      if (unit == last) return {{static_cast<uint64_t>(m.mlp_out), 0, 0}, {}};
      return {};
    case ModelOptions::Kind::kCtr:
      break;
  }
  STRATA_CHECK(false) << "model kind " << static_cast<int>(m.kind) << " has no tp split";
  return {};
}

// Sequence parallelism: floats of a unit's gradients summed over tp once a step (gpt.cc: the
// positions, and the norms).
uint64_t UnitSequencePartialFloats(const CommLayout& l, int unit) {
  const auto c = static_cast<uint64_t>(l.model.width);
  const int last = static_cast<int>(l.units.size()) - 1;
  if (unit == 0) return static_cast<uint64_t>(l.model.context) * c;  // positions
  return unit == last ? 2 * c : 4 * c;  // ln_f; a block's ln1 and ln2
}

bool Recomputes(const CommLayout& l, int unit) {
  if (l.recompute == ParallelOptions::Recompute::kFull) return true;  // every unit
  if (!l.model.recompute) return false;
  // model.recompute switches gpt's blocks (not the embedding or the head) and every mlp unit.
  const int last = static_cast<int>(l.units.size()) - 1;
  return l.model.kind == ModelOptions::Kind::kMlp || (unit > 0 && unit < last);
}

// The rank's compute actions, as the executor runs them: F runs the stage's forwards (and, on
// the last stage, the loss); B or I its input halves of backward, after the forward again in
// a unit that recomputes; W (the weight half) moves nothing.
void AddTensorParallelTraffic(const CommLayout& l, GroupTraffic* tp) {
  if (l.plan.tp < 2) return;
  Result<std::vector<pipeline::Action>> actions =
      pipeline::BuildActions(l.plan.schedule, l.plan.shape(), l.pp_rank);
  STRATA_CHECK(actions.ok()) << actions.status().ToString();
  const int last_stage = l.plan.shape().num_stages() - 1;
  OpFloats floats;  // per row of a micro-batch, over the step
  for (const pipeline::Action& a : *actions) {
    const UnitRange& units = l.plan.stages.at(static_cast<size_t>(a.stage));
    const bool backward =
        a.kind == pipeline::ActionKind::kBackward || a.kind == pipeline::ActionKind::kBackwardInput;
    if (a.kind != pipeline::ActionKind::kForward && !backward) continue;
    for (int u = units.first; u < units.last; ++u) {
      const TpFloats f = UnitTpFloats(l, u);
      if (!backward) {
        floats += f.forward;
        continue;
      }
      floats += f.backward;
      if (Recomputes(l, u)) floats += f.forward;
    }
    // The vocab-parallel cross-entropy: the logits' max per row, then the sum of exponentials
    // and the target's logit per row.
    if (!backward && a.stage == last_stage && l.model.kind == ModelOptions::Kind::kGpt) {
      floats.all_reduce += 1 + 2;
    }
  }
  const uint64_t rows = Rows(l);
  uint64_t partial = 0;  // sequence parallelism's gradients, summed once a step
  if (l.sequence_parallel) {
    for (int s : pipeline::StagesOfRank(l.plan.schedule, l.plan.shape(), l.pp_rank)) {
      const UnitRange& r = l.plan.stages.at(static_cast<size_t>(s));
      for (int u = r.first; u < r.last; ++u) partial += UnitSequencePartialFloats(l, u);
    }
  }
  Add(tp->per_step, CommOp::kAllReduce, (floats.all_reduce * rows + partial) * kFloat);
  if (floats.all_gather) Add(tp->per_step, CommOp::kAllGather, floats.all_gather * rows * kFloat);
  if (floats.reduce_scatter) Add(tp->per_step, CommOp::kReduceScatter, floats.reduce_scatter * rows * kFloat);
  Add(tp->per_step, CommOp::kHostAllReduce, kDouble);  // the split gradients' squared norm
}

// Ring attention (ring_attention.cc): in forward each block sends its keys and values on and
// receives the next cp - 1 times; backward does that again and passes each block's key/value
// gradients on cp times (the last brings every rank's own home).
void AddContextParallelTraffic(const CommLayout& l, GroupTraffic* cp) {
  if (l.plan.cp < 2) return;
  if (l.cp_averages_loss) Add(cp->per_step, CommOp::kHostAllReduce, kDouble);
  if (l.model.kind != ModelOptions::Kind::kGpt) return;  // per-token models exchange nothing
  Result<std::vector<pipeline::Action>> actions =
      pipeline::BuildActions(l.plan.schedule, l.plan.shape(), l.pp_rank);
  STRATA_CHECK(actions.ok()) << actions.status().ToString();
  const auto ring = static_cast<uint64_t>(l.plan.cp);
  const uint64_t block = 2 * Rows(l) * static_cast<uint64_t>(l.model.width / l.plan.tp) * kFloat;  // [2, rows, C/tp]
  const int last_unit = static_cast<int>(l.units.size()) - 1;
  uint64_t moves = 0;  // blocks sent (and as many received) over the step
  for (const pipeline::Action& a : *actions) {
    const bool backward =
        a.kind == pipeline::ActionKind::kBackward || a.kind == pipeline::ActionKind::kBackwardInput;
    if (a.kind != pipeline::ActionKind::kForward && !backward) continue;
    const UnitRange& units = l.plan.stages.at(static_cast<size_t>(a.stage));
    for (int u = std::max(units.first, 1); u < std::min(units.last, last_unit); ++u) {  // the blocks
      moves += backward ? (ring - 1) + ring + (Recomputes(l, u) ? ring - 1 : 0) : ring - 1;
    }
  }
  Add(cp->per_step, CommOp::kSend, moves * block);
  Add(cp->per_step, CommOp::kRecv, moves * block);
}

}  // namespace

CommModel ModelCommTraffic(const CommLayout& layout) {
  CommModel m;
  AddPipelineTraffic(layout, &m.pp);
  AddDataParallelTraffic(layout, &m.dp);
  AddTensorParallelTraffic(layout, &m.tp);
  AddContextParallelTraffic(layout, &m.cp);
  return m;
}

}  // namespace strata
