// schedules.cc: the schedule builders (GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V), each a
// small pure function from the shape and the rank to that rank's compute actions, and the
// insertion of the sends and receives between ranks.
#include "trainer/pipeline/schedules.h"

#include <algorithm>
#include <array>

#include "common/check.h"

namespace strata::pipeline {
namespace {

constexpr std::array<std::string_view, 5> kScheduleNames = {"gpipe", "1f1b", "interleaved", "zb-h1",
                                                            "zbv"};

Action F(int stage, int micro) { return {ActionKind::kForward, stage, micro}; }
Action B(int stage, int micro) { return {ActionKind::kBackward, stage, micro}; }
Action I(int stage, int micro) { return {ActionKind::kBackwardInput, stage, micro}; }
Action W(int stage, int micro) { return {ActionKind::kBackwardWeight, stage, micro}; }

// GPipe (Huang et al. 2019): every forward, then every backward. Peak memory m activations,
// bubble (p-1)/(m+p-1). Backward in increasing micro-batch order (not GPipe's reverse) so that
// gradients accumulate in the single process's order; the bubble is the same.
std::vector<Action> BuildGpipe(int stage, int m) {
  std::vector<Action> out;
  for (int k = 0; k < m; ++k) out.push_back(F(stage, k));
  for (int k = 0; k < m; ++k) out.push_back(B(stage, k));
  return out;
}

// 1F1B (PipeDream-Flush, Narayanan et al. 2021): rank r runs p-1-r forwards ahead (warm-up),
// then alternates one forward and one backward, then drains the backwards. Same bubble as
// GPipe but at most p - r activations alive on rank r instead of m.
std::vector<Action> Build1F1B(int p, int m, int rank) {
  const int warmup = std::min(p - 1 - rank, m);
  std::vector<Action> out;
  for (int k = 0; k < warmup; ++k) out.push_back(F(rank, k));
  for (int k = 0; k + warmup < m; ++k) {
    out.push_back(F(rank, k + warmup));
    out.push_back(B(rank, k));
  }
  for (int k = m - warmup; k < m; ++k) out.push_back(B(rank, k));
  return out;
}

// Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): rank r holds stages r, p + r, ...,
// (v-1)p + r. Micro-batches go through in rounds of p: the k-th forward of a rank is chunk
// (k / p) % v of micro-batch (k / (p v)) p + k % p, so a rank finishes a round of p
// micro-batches on one chunk before moving the round to its next chunk; backwards walk the
// chunks in reverse. The warm-up is (v-1)p forwards (the last rank must fill all its chunks
// but one before its first backward can start) plus 2 (p-1-r) so rank r stays ahead of its
// successor. Bubble (p-1)/(v m + p - 1); rank 0 holds up to v p + p - 1 stage activations
// (Megatron's p (1 + (p-1)/(p v)) micro-batches of a whole rank's layers).
std::vector<Action> BuildInterleaved(int p, int v, int m, int rank) {
  const int total = v * m;
  auto micro = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto forward = [&](int k) { return F(((k / p) % v) * p + rank, micro(k)); };
  auto backward = [&](int k) { return B((v - 1 - (k / p) % v) * p + rank, micro(k)); };
  const int warmup = std::min((v - 1) * p + 2 * (p - 1 - rank), total);
  std::vector<Action> out;
  for (int k = 0; k < warmup; ++k) out.push_back(forward(k));
  for (int k = 0; k + warmup < total; ++k) {
    out.push_back(forward(k + warmup));
    out.push_back(backward(k));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(backward(k));
  return out;
}

// ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", section 3.1): 1F1B's order of
// forwards and input-backwards (I in place of B), with each weight-backward W deferred.
// Rank r defers its W's by r steady steps: 1F1B leaves rank r holding only p - r activations,
// so r more fit under 1F1B's peak (p, rank 0's), and the deferred W's fill the cool-down,
// where 1F1B idles waiting for backwards from downstream. Bubble (p-1)(F + I - W) per rank
// instead of 1F1B's (p-1)(F + I + W): a third of it when F = I = W.
std::vector<Action> BuildZbH1(int p, int m, int rank) {
  const int warmup = std::min(p - 1 - rank, m);
  const int defer = rank;
  std::vector<Action> out;
  int next_w = 0;
  for (int k = 0; k < warmup; ++k) out.push_back(F(rank, k));
  for (int k = 0; k + warmup < m; ++k) {
    out.push_back(F(rank, k + warmup));
    out.push_back(I(rank, k));
    if (k >= defer) out.push_back(W(rank, next_w++));
  }
  // Cool-down: every I is followed by one deferred W, which runs while the next I's gradient
  // is still on its way from downstream.
  for (int k = m - warmup; k < m; ++k) {
    out.push_back(I(rank, k));
    out.push_back(W(rank, next_w++));
  }
  while (next_w < m) out.push_back(W(rank, next_w++));
  return out;
}

// ZB-V (Qi et al. 2024, section 6; PyTorch's ScheduleZBVZeroBubble builds the same order):
// rank r holds stage r (chunk 0, going down the V) and stage 2p-1-r (chunk 1, coming back up),
// so the V turns on the last rank (stages p-1 and p hand over without communication) and the
// first stage's input and the loss both sit on rank 0. Phases for rank r:
//   warm-up 1: 2(p-r)-1 forwards of chunk 0 (fill the way down);
//   warm-up 2: r pairs (chunk 1 forward, chunk 0 forward) as chunk 1 inputs start to return;
//   warm-up 3: p-r triples (chunk 1 F, I, W): the first backwards start at the V's bottom;
//   steady: (chunk 0 F, I, W, chunk 1 F, I, W) until all forwards are out;
//   cool-down: r pairs of I (chunk 0, chunk 1), p-r pairs (chunk 0 I, W), then the W's left.
// Every rank peaks at 2p stage activations, 1F1B's p micro-batches of a whole rank's layers.
// The construction needs at least 2p-1 micro-batches to fill the V; with fewer it is built for
// 2p-1 and the micro-batches that do not exist are dropped (as PyTorch does): every rank's
// order stays a sub-order of a deadlock-free schedule, so it cannot deadlock either.
std::vector<Action> BuildZbv(int p, int m, int rank) {
  const int n = std::max(m, 2 * p - 1);
  const int down = rank, up = 2 * p - 1 - rank;
  int f0 = 0, f1 = 0, i0 = 0, i1 = 0;
  std::vector<Action> out;
  auto add = [&](Action a) {
    if (a.micro < m) out.push_back(a);
  };
  for (int k = 0; k < 2 * (p - rank) - 1; ++k) add(F(down, f0++));
  for (int k = 0; k < rank; ++k) {
    add(F(up, f1++));
    add(F(down, f0++));
  }
  for (int k = 0; k < p - rank; ++k) {
    add(F(up, f1++));
    add(I(up, i1));
    add(W(up, i1++));
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n) add(F(down, f0++));
    add(I(down, i0));
    add(W(down, i0++));
    add(F(up, f1++));
    add(I(up, i1));
    add(W(up, i1++));
  }
  int w0 = i0, w1 = i1;
  for (int k = 0; k < rank; ++k) {
    add(I(down, i0++));
    add(I(up, i1++));
  }
  for (int k = 0; k < p - rank; ++k) {
    add(I(down, i0++));
    add(W(down, w0++));
  }
  while (w1 < i1) add(W(up, w1++));
  while (w0 < i0) add(W(down, w0++));
  return out;
}

}  // namespace

std::string_view ScheduleKindName(ScheduleKind kind) {
  return kScheduleNames[static_cast<size_t>(kind)];
}

Result<ScheduleKind> ParseScheduleKind(std::string_view name) {
  for (size_t k = 0; k < kScheduleNames.size(); ++k) {
    if (name == kScheduleNames[k]) return static_cast<ScheduleKind>(k);
  }
  std::string valid;
  for (std::string_view n : kScheduleNames) valid += (valid.empty() ? "" : ", ") + std::string(n);
  return Status::InvalidArgument("unknown pipeline schedule '" + std::string(name) +
                                 "' (valid: " + valid + ")");
}

Status Validate(ScheduleKind kind, const PipelineShape& shape) {
  const std::string name(ScheduleKindName(kind));
  if (shape.pp < 1) {
    return Status::InvalidArgument("pp must be >= 1, got " + std::to_string(shape.pp));
  }
  if (shape.micro_batches < 1) {
    return Status::InvalidArgument("micro_batches must be >= 1, got " +
                                   std::to_string(shape.micro_batches));
  }
  const std::string vpp = std::to_string(shape.vpp);
  switch (kind) {
    case ScheduleKind::kGpipe:
    case ScheduleKind::k1F1B:
    case ScheduleKind::kZbH1:
      if (shape.vpp != 1) {
        return Status::InvalidArgument("vpp must be 1 for " + name + ", got " + vpp);
      }
      break;
    case ScheduleKind::kInterleaved:
      if (shape.vpp < 2) {
        return Status::InvalidArgument("vpp must be >= 2 for interleaved (stages per rank), got " +
                                       vpp);
      }
      if (shape.micro_batches % shape.pp != 0) {
        return Status::InvalidArgument(
            "micro_batches must be a multiple of pp for interleaved (rounds of pp micro-batches), "
            "got " +
            std::to_string(shape.micro_batches) + " with pp " + std::to_string(shape.pp));
      }
      break;
    case ScheduleKind::kZbv:
      if (shape.vpp != 2) {
        return Status::InvalidArgument("vpp must be 2 for zbv (two stages per rank, in a V), got " +
                                       vpp);
      }
      break;
  }
  return Status::OK();
}

std::vector<int> StagesOfRank(ScheduleKind kind, const PipelineShape& shape, int rank) {
  STRATA_CHECK_OK(Validate(kind, shape));
  STRATA_CHECK(rank >= 0 && rank < shape.pp) << "rank " << rank << " of pp " << shape.pp;
  if (kind == ScheduleKind::kZbv) return {rank, 2 * shape.pp - 1 - rank};
  std::vector<int> stages;
  for (int c = 0; c < shape.vpp; ++c) stages.push_back(c * shape.pp + rank);
  return stages;
}

int RankOfStage(ScheduleKind kind, const PipelineShape& shape, int stage) {
  STRATA_CHECK_OK(Validate(kind, shape));
  STRATA_CHECK(stage >= 0 && stage < shape.num_stages())
      << "stage " << stage << " of " << shape.num_stages();
  if (kind == ScheduleKind::kZbv) return stage < shape.pp ? stage : 2 * shape.pp - 1 - stage;
  return stage % shape.pp;
}

Result<std::vector<Action>> BuildComputeActions(ScheduleKind kind, const PipelineShape& shape,
                                                int rank) {
  STRATA_RETURN_IF_ERROR(Validate(kind, shape));
  if (rank < 0 || rank >= shape.pp) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " out of range for pp " +
                                   std::to_string(shape.pp));
  }
  const int p = shape.pp, m = shape.micro_batches;
  switch (kind) {
    case ScheduleKind::kGpipe:
      return BuildGpipe(rank, m);
    case ScheduleKind::k1F1B:
      return Build1F1B(p, m, rank);
    case ScheduleKind::kInterleaved:
      return BuildInterleaved(p, shape.vpp, m, rank);
    case ScheduleKind::kZbH1:
      return BuildZbH1(p, m, rank);
    case ScheduleKind::kZbv:
      return BuildZbv(p, m, rank);
  }
  return Status::Internal("unhandled schedule kind");
}

// A send may not wait for its receive to be posted: in 1F1B rank 0 sends micro-batch 1 forward
// (0SEND_F1) before receiving micro-batch 0's gradient (0RECV_B0), while rank 1 sends that
// gradient (1SEND_B0) before receiving micro-batch 1 (1RECV_F1). With rendezvous sends both
// would block; the executor posts receives ahead or sends asynchronously (as PyTorch does).
Result<std::vector<Action>> BuildActions(ScheduleKind kind, const PipelineShape& shape, int rank) {
  STRATA_ASSIGN_OR_RETURN(std::vector<Action> compute, BuildComputeActions(kind, shape, rank));
  const int last = shape.num_stages() - 1;
  auto remote = [&](int stage) { return RankOfStage(kind, shape, stage) != rank; };
  std::vector<Action> out;
  for (const Action& a : compute) {
    const int s = a.stage, k = a.micro;
    switch (a.kind) {
      case ActionKind::kForward:
        if (s > 0 && remote(s - 1)) out.push_back({ActionKind::kRecvF, s, k});
        out.push_back(a);
        if (s < last && remote(s + 1)) out.push_back({ActionKind::kSendF, s, k});
        break;
      case ActionKind::kBackward:
      case ActionKind::kBackwardInput:
        if (s < last && remote(s + 1)) out.push_back({ActionKind::kRecvB, s, k});
        out.push_back(a);
        if (s > 0 && remote(s - 1)) out.push_back({ActionKind::kSendB, s, k});
        break;
      default:
        out.push_back(a);
        break;
    }
  }
  return out;
}

}  // namespace strata::pipeline
