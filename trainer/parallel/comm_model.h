// comm_model.h: ModelCommTraffic, the analytical count of the bytes each of a trainer's groups
// (pp, dp, tp) moves in a training step, from the layout alone: the plan, the model's unit
// specs and a micro-batch's shape. The trainer prints it beside what its communicators
// counted (comm_report.h); the two must agree exactly.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "common/tensor.h"
#include "trainer/comm/comm_stats.h"
#include "trainer/models/model.h"
#include "trainer/parallel/plan.h"

namespace strata {

// What the model needs to know about one trainer's place in the job. A value; the plan and
// units are copied.
struct CommLayout {
  ParallelPlan plan;
  int pp_rank = 0;
  // Every unit of the model, as built (Model::units()): with tp > 1, this rank's shard's
  // parameters and outputs.
  std::vector<UnitSpec> units;
  Shape micro_batch;            // Model::LeadingShape of one micro-batch: [N] or [N, T]
  // The replicas all-reduce gradients (sync.mode allreduce or hybrid, dp > 1).
  bool dp_all_reduce = false;
  // sync.overlap: after its first step the all-reduce re-cuts its buckets in the order
  // backward produced the gradients, and rank 0 broadcasts that order (one float per tensor).
  bool overlap = true;
  // Read from the parameter registry, not derivable from unit specs: floats of this rank's
  // parameters the servers hold (hybrid's embeddings, which are not all-reduced), and the
  // number of parameter tensors the all-reduce covers (the length of the bucket order).
  int64_t server_floats = 0;
  int64_t all_reduced_tensors = 0;
  // ZeRO (parallel.zero >= 1): gradients are reduce-scattered and parameters all-gathered in
  // buckets padded to a multiple of dp: the padded floats of the buckets as laid out after the
  // first step, and of the first step's layout (reduced once more after the re-cut).
  int zero = 0;
  int64_t zero_padded_floats = 0;
  int64_t zero_first_padded_floats = 0;
  // ZeRO-3: by unit, the padded floats of its bucket (0: no parameters), all-gathered whenever
  // the unit computes and its parameters are not gathered (Zero3Sync's policy).
  std::vector<int64_t> zero3_unit_floats;
  // Tensor parallelism (plan.tp > 1) needs the model's own sizes (what the tp all-reduces
  // carry) and which units run their forward again in backward: model.recompute (gpt's
  // blocks, every mlp unit) and parallel.recompute full (every unit).
  ModelOptions model;
  ParallelOptions::Recompute recompute = ParallelOptions::Recompute::kNone;
  // Sequence parallelism turns each tp all-reduce of an activation into an all-gather or a
  // reduce-scatter (the same bytes by CommStats' definition) and sums the norms' and positions'
  // gradients over tp once a step.
  bool sequence_parallel = false;
  // Context parallelism (plan.cp > 1) with no dp group (replicas meeting on the servers): the
  // loss is averaged over the cp ranks instead (one double a step).
  bool cp_averages_loss = false;
};

// Expected payload bytes of one group on this rank, per CommOp (CommStats' definition of a
// byte). Calls are not modelled: the all-reduce's bucket count follows backward's order.
struct GroupTraffic {
  std::array<uint64_t, kNumCommOps> per_step{};    // in every training step
  std::array<uint64_t, kNumCommOps> first_step{};  // added once, in the first step a trainer runs

  uint64_t Bytes(CommOp op, int64_t steps) const {
    const auto i = static_cast<size_t>(op);
    return steps > 0 ? per_step[i] * static_cast<uint64_t>(steps) + first_step[i] : 0;
  }
};

struct CommModel {
  GroupTraffic pp, dp, tp, cp;
};

// The traffic of a training step (forward, backward, gradient synchronisation, the loss and
// the gradient norm; not evaluation, checkpoints or set-up) on trainer `layout.pp_rank`:
//  pp: per micro-batch, the activation of each stage boundary the rank's schedule crosses
//      (SEND_F / RECV_F) and its gradient back (SEND_B / RECV_B), each an OutputShape of the
//      unit before the boundary, 4 bytes a float; plus the step's loss and squared gradient
//      norm summed over the pipeline (two host all-reduces of one double).
//  dp: one all-reduce of every gradient of the rank's units (the unit specs' parameters,
//      less server_floats), 4 bytes a float; the loss averaged over the replicas (one double);
//      with overlap, the bucket order broadcast once (all_reduced_tensors floats). Under ZeRO,
//      instead of the all-reduce: a reduce-scatter and an all-gather of the padded buckets
//      (zero_padded_floats each) and the shards' squared gradient norms (one host all-reduce
//      of two doubles); with overlap, the first step's reduce-scatter in the first layout once
//      more (zero_first_padded_floats). ZeRO-3: the reduce-scatter of the padded buckets, and
//      an all-gather of a unit's bucket at each forward or backward of a micro-batch that finds
//      it freed (freed after every forward but the last unit's, and after every backward),
//      walked over the schedule's actions; no re-cut.
//  tp: per micro-batch, the all-reduces of the rank's split layers (Megatron's: a row-parallel
//      layer's output in forward, a column-parallel layer's input gradient in backward, the
//      vocab-parallel embedding's rows in forward), again in backward for a unit that
//      recomputes its forward; on the last stage the vocab-parallel cross-entropy's max
//      ([rows]) and sums ([2, rows]); plus the squared norm of the split gradients (one host
//      all-reduce of a double a step). See AddTensorParallelTraffic in comm_model.cc.
//  cp: per micro-batch and gpt block, ring attention's key/value blocks ([2, rows, C/tp] each)
//      sent on and received cp - 1 times in forward, and in backward cp - 1 times again plus
//      their gradients (the same size) cp times; forward's again in a block that recomputes.
//      With no dp group, the loss averaged over the ring (one host all-reduce of a double).
CommModel ModelCommTraffic(const CommLayout& layout);

}  // namespace strata
