// comm_model.cc: ModelCommTraffic, one function per mesh dimension.
#include "trainer/parallel/comm_model.h"

#include "common/check.h"
#include "trainer/pipeline/schedules.h"

namespace strata {
namespace {

constexpr uint64_t kFloat = sizeof(float);
constexpr uint64_t kDouble = sizeof(double);

void Add(std::array<uint64_t, kNumCommOps>& bytes, CommOp op, uint64_t n) {
  bytes[static_cast<size_t>(op)] += n;
}

// Floats of unit `unit`'s output for one micro-batch.
uint64_t OutputFloats(const CommLayout& l, int unit) {
  uint64_t n = static_cast<uint64_t>(l.units.at(static_cast<size_t>(unit)).out_width);
  for (int64_t d : l.micro_batch) n *= static_cast<uint64_t>(d);
  return n;
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

void AddDataParallelTraffic(const CommLayout& l, GroupTraffic* dp) {
  if (!l.dp_all_reduce) return;
  int64_t floats = 0;
  for (int s : pipeline::StagesOfRank(l.plan.schedule, l.plan.shape(), l.pp_rank)) {
    const UnitRange& r = l.plan.stages.at(static_cast<size_t>(s));
    for (int u = r.first; u < r.last; ++u) floats += l.units.at(static_cast<size_t>(u)).params;
  }
  floats -= l.server_floats;
  Add(dp->per_step, CommOp::kAllReduce, static_cast<uint64_t>(floats) * kFloat);
  Add(dp->per_step, CommOp::kHostAllReduce, kDouble);  // the loss, averaged over the replicas
  if (l.overlap) {
    Add(dp->first_step, CommOp::kHostBroadcast,
        static_cast<uint64_t>(l.all_reduced_tensors) * kFloat);
  }
}

// Tensor parallelism's terms: none yet, as no layer is split on this branch (a tp group is
// made, and nothing runs on it). When layers are split Megatron's way, add here, per step and
// per micro-batch, for each transformer block of the rank's stages (tokens = the micro-batch's
// N * T, width = the block's out_width):
//  - forward: one all-reduce of the activation [tokens, width] after each column/row-parallel
//    pair (attention, MLP);
//  - backward: one all-reduce of the input gradient [tokens, width] per pair;
//  - a vocabulary-parallel loss: its small all-reduces per micro-batch (max and sum of the
//    logits' exponentials, [tokens] each, and the target logit);
// and drop the split parameters' replicated floats from the dp all-reduce above accordingly.
void AddTensorParallelTraffic(const CommLayout& l, GroupTraffic* tp) {
  (void)l;
  (void)tp;
}

}  // namespace

CommModel ModelCommTraffic(const CommLayout& layout) {
  CommModel m;
  AddPipelineTraffic(layout, &m.pp);
  AddDataParallelTraffic(layout, &m.dp);
  AddTensorParallelTraffic(layout, &m.tp);
  return m;
}

}  // namespace strata
