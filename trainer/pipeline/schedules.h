// schedules.h: pipeline schedules as data. A builder is a pure function of (schedule, pp, vpp,
// micro-batches, rank) that returns the rank's list of actions for one training step: GPipe,
// 1F1B, interleaved 1F1B (Megatron's virtual stages), ZB-H1 and ZB-V (zero-bubble, Qi et al.
// 2024). Nothing here communicates or computes: the executor (executor.h) runs the lists, the
// simulator (simulate.h) times them, strata-schedule prints and draws them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "trainer/pipeline/action.h"

namespace strata::pipeline {

enum class ScheduleKind { kGpipe, k1F1B, kInterleaved, kZbH1, kZbv };

std::string_view ScheduleKindName(ScheduleKind kind);  // "gpipe", "1f1b", "interleaved", "zb-h1", "zbv"
// InvalidArgument listing the valid names otherwise.
Result<ScheduleKind> ParseScheduleKind(std::string_view name);

// The shape of a pipeline: pp ranks, vpp stages (model chunks) on each, m micro-batches a step.
struct PipelineShape {
  int pp = 1;
  int vpp = 1;
  int micro_batches = 1;
  int num_stages() const { return pp * vpp; }
};

// OK when `kind` can run `shape`, else InvalidArgument naming the field and the rule:
// gpipe, 1f1b, zb-h1: vpp 1; interleaved: vpp >= 2 and micro_batches a multiple of pp;
// zbv: vpp 2; every schedule: pp >= 1, micro_batches >= 1.
Status Validate(ScheduleKind kind, const PipelineShape& shape);

// Which global stages rank `rank` holds, in its local chunk order (chunk c is the c-th entry):
// a loop (stage = c * pp + rank) for every schedule but zbv, whose V puts stages rank and
// 2 * pp - 1 - rank on a rank (so the first and last stages share rank 0). Requires a valid
// (kind, shape).
std::vector<int> StagesOfRank(ScheduleKind kind, const PipelineShape& shape, int rank);
int RankOfStage(ScheduleKind kind, const PipelineShape& shape, int stage);

// The compute actions (F, B, I, W) of `rank` for one step, in the order it runs them. Every
// schedule's gradients for a stage accumulate in micro-batch order, so a pipelined step sums
// exactly what the single process sums. gpipe and 1f1b use full backward (B); zb-h1 and zbv
// split it (I, then W later); interleaved uses B.
Result<std::vector<Action>> BuildComputeActions(ScheduleKind kind, const PipelineShape& shape, int rank);

// BuildComputeActions with the communication inserted: RECV_F right before an F whose input
// comes from another rank, SEND_F right after an F whose output goes to another rank, and
// likewise RECV_B / SEND_B around B or I. Stage-to-stage hand-offs on one rank (zbv's turn at
// the V's bottom, interleaved with pp = 1) need no action.
Result<std::vector<Action>> BuildActions(ScheduleKind kind, const PipelineShape& shape, int rank);

}  // namespace strata::pipeline
