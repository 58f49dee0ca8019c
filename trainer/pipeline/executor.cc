// executor.cc: StageExecutor.
#include "trainer/pipeline/executor.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "trainer/device.h"
#include "trainer/ops/ops.h"

namespace strata::pipeline {
namespace {

double NowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Evaluation's messages use their own tags, above every training step's.
constexpr uint32_t kEvalTagBase = 1u << 30;

}  // namespace

StageExecutor::StageExecutor(Model& model, const ParallelPlan& plan, int trainer, Communicator* pp,
                             Trace* trace)
    : model_(model),
      plan_(plan),
      pp_rank_(plan.mesh.Coords(trainer)[plan.mesh.DimIndex("pp")]),
      trainers_(plan.mesh.GroupOf(trainer, "pp")),
      pp_(pp),
      trace_(trace) {
  const int pp_rank = pp_rank_;
  stages_ = StagesOfRank(plan.schedule, plan.shape(), pp_rank);
  Result<std::vector<Action>> actions = BuildActions(plan.schedule, plan.shape(), pp_rank);
  STRATA_CHECK(actions.ok()) << actions.status().ToString();  // the plan was validated
  actions_ = *std::move(actions);
  STRATA_CHECK(plan.pp == 1 || pp != nullptr) << "a pipeline of " << plan.pp << " ranks needs its communicator";
}

std::string StageExecutor::Describe(int stage) const {
  const int r = RankOf(stage);
  return "stage " + std::to_string(stage) + " (pipeline rank " + std::to_string(r) + ", trainer " +
         std::to_string(trainers_[r]) + ")";
}

bool StageExecutor::Local(int stage) const { return RankOf(stage) == pp_rank_; }
int StageExecutor::RankOf(int stage) const { return RankOfStage(plan_.schedule, plan_.shape(), stage); }
bool StageExecutor::holds_last_stage() const { return Local(plan_.shape().num_stages() - 1); }

uint32_t StageExecutor::Tag(bool forward, int stage, int micro) const {
  return HandoffTag(forward, stage, micro, plan_.micro_batches);
}

Status StageExecutor::PostRecv(const Action& a) {
  const bool forward = a.kind == ActionKind::kRecvF;
  auto& posted = forward ? recv_f_ : recv_b_;
  const Key key{a.stage, a.micro};
  if (posted.contains(key)) return Status::OK();  // posted ahead
  const Batch& b = (*batches_)[a.micro];
  const UnitRange& units = plan_.stages[a.stage];
  // F receives the previous stage's output; B receives the gradient of this stage's output.
  const Shape shape = forward ? model_.OutputShape(units.first - 1, b) : model_.OutputShape(units.last - 1, b);
  Pending p;
  p.buffer = ops::NewTensor(model_.exec(), shape);
  const int peer = RankOf(forward ? a.stage - 1 : a.stage + 1);
  Result<std::unique_ptr<Communicator::Request>> r =
      pp_->IRecv(p.buffer.data_as<float>(), static_cast<size_t>(p.buffer.numel()), peer, Tag(forward, a.stage, a.micro));
  if (!r.ok()) return r.status().WithContext("pipeline rank " + std::to_string(pp_rank_) + ", " + ToString(a));
  p.request = *std::move(r);
  posted.emplace(key, std::move(p));
  return Status::OK();
}

Result<Tensor> StageExecutor::TakeRecv(std::map<Key, Pending>& posted, Key key, const char* what) {
  auto it = posted.find(key);
  if (it == posted.end()) {
    return Status::Internal(std::string(what) + " of stage " + std::to_string(key.first) + ", micro-batch " +
                            std::to_string(key.second) + " was never received (a schedule without its RECV)");
  }
  Pending p = std::move(it->second);
  posted.erase(it);
  const double start = NowUs();
  Status s = p.request->Wait();
  if (trace_ && trace_->enabled()) {
    trace_->Add({std::string("wait ") + what, "pipeline", 0, start - (NowUs() - trace_->NowUs()),
                 NowUs() - start, step_});
  }
  if (!s.ok()) {
    const int peer_stage = key.first + (std::string(what) == "activation" ? -1 : 1);
    return s.WithContext("pipeline rank " + std::to_string(pp_rank_) + " waiting for the " + what +
                         " of micro-batch " + std::to_string(key.second) + " from " + Describe(peer_stage));
  }
  return p.buffer;
}

Status StageExecutor::Send(const Action& a) {
  const bool forward = a.kind == ActionKind::kSendF;
  Trace::Scope scope(trace_, forward ? "send activation" : "send gradient", "pipeline", 0, step_);
  auto& from = forward ? outputs_ : input_grads_;
  auto it = from.find({a.stage, a.micro});
  if (it == from.end()) return Status::Internal(ToString(a) + ": nothing computed to send");
  Pending p;
  p.buffer = it->second;
  from.erase(it);
  // Device tensors go to NCCL on its own stream: the compute that wrote them must be done.
  // (A stream wait on an event would keep the host free; see docs/architecture.md.)
  SynchronizeDevice(model_.exec());
  const int peer = RankOf(forward ? a.stage + 1 : a.stage - 1);
  // The receiver's tag names the receiving stage.
  const uint32_t tag = forward ? Tag(true, a.stage + 1, a.micro) : Tag(false, a.stage - 1, a.micro);
  Result<std::unique_ptr<Communicator::Request>> r =
      pp_->ISend(p.buffer.data_as<float>(), static_cast<size_t>(p.buffer.numel()), peer, tag);
  if (!r.ok()) return r.status().WithContext("pipeline rank " + std::to_string(pp_rank_) + ", " + ToString(a));
  p.request = *std::move(r);
  p.peer_stage = forward ? a.stage + 1 : a.stage - 1;
  sends_.push_back(std::move(p));
  return Status::OK();
}

Status StageExecutor::WaitSends() {
  Status first;
  for (Pending& p : sends_) {
    Status s = p.request->Wait();
    if (!s.ok() && first.ok()) {
      first = s.WithContext("pipeline rank " + std::to_string(pp_rank_) + " sending to " + Describe(p.peer_stage));
    }
  }
  sends_.clear();
  return first;
}

void StageExecutor::TrackMemory() {
  int64_t bytes = 0;
  for (const auto& [key, ctx] : contexts_) bytes += ctx->saved_bytes();
  timings_.peak_saved_bytes = std::max(timings_.peak_saved_bytes, bytes);
  timings_.peak_live = std::max(timings_.peak_live, static_cast<int>(contexts_.size()));
}

Status StageExecutor::RunCompute(const Action& a) {
  const Key key{a.stage, a.micro};
  const UnitRange units = plan_.stages[a.stage];
  const bool last_stage = a.stage == plan_.shape().num_stages() - 1;
  // Inputs first (a wait on a neighbour is idle time, not compute).
  Tensor in;
  if (a.kind == ActionKind::kForward && a.stage > 0) {
    if (Local(a.stage - 1)) {
      auto it = outputs_.find({a.stage - 1, a.micro});
      if (it == outputs_.end()) return Status::Internal(ToString(a) + " before the previous stage's F");
      in = it->second;
      outputs_.erase(it);
    } else {
      STRATA_ASSIGN_OR_RETURN(in, TakeRecv(recv_f_, key, "activation"));
    }
  } else if ((a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardInput) && !last_stage) {
    if (Local(a.stage + 1)) {
      auto it = input_grads_.find({a.stage + 1, a.micro});
      if (it == input_grads_.end()) return Status::Internal(ToString(a) + " before the next stage's backward");
      in = it->second;
      input_grads_.erase(it);
    } else {
      STRATA_ASSIGN_OR_RETURN(in, TakeRecv(recv_b_, key, "gradient"));
    }
  }
  const double start = NowUs();
  switch (a.kind) {
    case ActionKind::kForward: {
      auto ctx = std::make_unique<nn::Context>(model_.exec(), true, (*seed_of_)(a.micro));
      if (a.micro == plan_.micro_batches - 1 && *grad_ready_) ctx->set_grad_ready(*grad_ready_);
      Tensor out = model_.ForwardUnits(units, device_batches_[a.micro], in, *ctx);
      if (last_stage) {
        loss_ += model_.loss_head().Forward(out, device_batches_[a.micro].target, *ctx,
                                            1.0f / static_cast<float>(plan_.micro_batches));
      } else {
        outputs_[key] = out;
      }
      contexts_[key] = std::move(ctx);
      TrackMemory();
      break;
    }
    case ActionKind::kBackward:
    case ActionKind::kBackwardInput: {
      auto it = contexts_.find(key);
      if (it == contexts_.end()) return Status::Internal(ToString(a) + " without its F");
      nn::Context& ctx = *it->second;
      if (last_stage) in = model_.loss_head().Backward(ctx);
      const bool full = a.kind == ActionKind::kBackward;
      Tensor dx = model_.BackwardUnits(units, in, ctx, full ? BackwardPart::kFull : BackwardPart::kInput);
      if (a.stage > 0) input_grads_[key] = dx;
      if (full) contexts_.erase(it);
      break;
    }
    case ActionKind::kBackwardWeight: {
      auto it = contexts_.find(key);
      if (it == contexts_.end()) return Status::Internal(ToString(a) + " without its F and I");
      model_.BackwardWeightUnits(units, *it->second);
      contexts_.erase(it);
      break;
    }
    default:
      return Status::Internal(ToString(a) + " is not a compute action");
  }
  const double end = NowUs();
  timings_.actions.push_back({a, start - origin_us_, end - origin_us_});
  timings_.busy_us += end - start;
  if (trace_ && trace_->enabled()) {
    trace_->Add({ToString(a), "pipeline", 0, trace_->NowUs() - (end - start), end - start, step_});
  }
  return Status::OK();
}

Result<double> StageExecutor::RunStep(const std::vector<Batch>& batches, int64_t step,
                                      const nn::Context::GradReadyFn& grad_ready,
                                      const std::function<uint64_t(int)>& seed_of) {
  STRATA_CHECK_EQ(static_cast<int>(batches.size()), plan_.micro_batches);
  batches_ = &batches;
  device_batches_.clear();
  for (const Batch& b : batches) device_batches_.push_back(model_.ToDevice(b));
  step_ = step;
  grad_ready_ = &grad_ready;
  seed_of_ = &seed_of;
  loss_ = 0;
  timings_ = StepTimings();
  origin_us_ = NowUs();
  Status status;
  // Every receive of the step is posted before any compute: a transfer starts the moment its
  // sender posts it, and the compute thread never takes Gloo's locks to post a receive in the
  // middle of the step (on a loaded host the I/O thread holding them can be descheduled for a
  // whole time slice). The cost is the step's boundary buffers held at once: m activations and
  // m gradients of the stage's boundary, small beside the activations its F saves.
  for (size_t i = 0; i < actions_.size() && status.ok(); ++i) {
    if (actions_[i].kind == ActionKind::kRecvF || actions_[i].kind == ActionKind::kRecvB) status = PostRecv(actions_[i]);
  }
  for (size_t i = 0; i < actions_.size() && status.ok(); ++i) {
    const Action& a = actions_[i];
    switch (a.kind) {
      case ActionKind::kRecvF:
      case ActionKind::kRecvB:
        break;  // posted at the start of the step
      case ActionKind::kSendF:
      case ActionKind::kSendB:
        status = Send(a);
        break;
      default:
        status = RunCompute(a);
    }
  }
  Status sent = WaitSends();
  if (status.ok()) status = sent;
  timings_.step_us = NowUs() - origin_us_;
  // Whatever a failed step left behind goes; the next step starts clean.
  const bool leftovers = !contexts_.empty() || !outputs_.empty() || !input_grads_.empty() ||
                         !recv_f_.empty() || !recv_b_.empty();
  contexts_.clear();
  outputs_.clear();
  input_grads_.clear();
  recv_f_.clear();
  recv_b_.clear();
  device_batches_.clear();
  if (!status.ok()) return status;
  if (leftovers) return Status::Internal("pipeline step " + std::to_string(step) + " left work undone (a schedule bug)");
  return holds_last_stage() ? loss_ : 0.0;
}

Result<double> StageExecutor::Forward(const Batch& batch, Tensor* output) {
  const Batch b = model_.ToDevice(batch);
  const int last = plan_.shape().num_stages() - 1;
  nn::Context ctx(model_.exec(), false, 0);
  Tensor x;
  double loss = 0;
  for (int s : stages_) {  // increasing: a rank's stages come in model order
    const UnitRange units = plan_.stages[s];
    if (s > 0 && !Local(s - 1)) {
      x = ops::NewTensor(model_.exec(), model_.OutputShape(units.first - 1, b));
      Status st = pp_->Recv(x.data_as<float>(), static_cast<size_t>(x.numel()), RankOf(s - 1), kEvalTagBase + s);
      if (!st.ok()) return st.WithContext("evaluation: pipeline rank " + std::to_string(pp_rank_) + " receiving stage " + std::to_string(s) + "'s input");
    }
    x = model_.ForwardUnits(units, b, x, ctx);
    if (s == last) {
      loss = model_.loss_head().Forward(x, b.target, ctx);
      if (output) *output = ToHost(x);
    } else if (!Local(s + 1)) {
      SynchronizeDevice(model_.exec());
      // Blocking is safe here: activations flow one way and the next stage is receiving.
      Status st = pp_->Send(x.data_as<float>(), static_cast<size_t>(x.numel()), RankOf(s + 1), kEvalTagBase + s + 1);
      if (!st.ok()) return st.WithContext("evaluation: sending stage " + std::to_string(s) + "'s output");
    }
  }
  return loss;
}

}  // namespace strata::pipeline
