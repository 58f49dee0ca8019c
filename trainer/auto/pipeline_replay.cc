// pipeline_replay.cc: PipelineReplay.
#include "trainer/auto/pipeline_replay.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "cluster/inproc_cluster.h"
#include "trainer/comm/gloo_communicator.h"

namespace strata {
namespace {

using pipeline::Action;
using pipeline::ActionKind;
using Clock = std::chrono::steady_clock;

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// `seconds` of this thread's CPU time: a spin that is preempted resumes and still does its work.
void SpinCpu(double seconds) {
  if (seconds <= 0) return;
  const double end = ThreadCpuSeconds() + seconds;
  volatile double sink = 0;
  do {
    for (int i = 0; i < 256; ++i) sink = sink + 1.0;
  } while (ThreadCpuSeconds() < end);
}

void Wait(double seconds) {
  if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

double At(const std::vector<double>& v, int s) { return s < static_cast<int>(v.size()) ? v[s] : 0.0; }

// One rank's step: the executor's order (every receive posted first, sends not waited for until
// the end), compute run by `work` or replaced by spins.
Status RankStep(Communicator* comm, pipeline::ScheduleKind kind, const pipeline::PipelineShape& shape,
                const std::vector<Action>& actions, const PipelineStepCosts& step, int rank, ReplayWork* work) {
  const int stages = shape.num_stages();
  auto tag = [&shape](bool forward, int stage, int micro) {
    return pipeline::HandoffTag(forward, stage, micro, shape.micro_batches);
  };
  auto floats = [&](int boundary_stage) {
    const int64_t bytes = boundary_stage >= 0 && boundary_stage < static_cast<int>(step.boundary_bytes.size())
                              ? step.boundary_bytes[boundary_stage]
                              : 4;
    return static_cast<size_t>(std::max<int64_t>(1, bytes / 4));
  };
  struct Pending {
    std::vector<float> buffer;
    std::unique_ptr<Communicator::Request> request;
  };
  std::map<std::tuple<bool, int, int>, Pending> recvs;  // (forward, stage, micro)
  std::vector<Pending> sends;
  for (const Action& a : actions) {
    if (a.kind != ActionKind::kRecvF && a.kind != ActionKind::kRecvB) continue;
    const bool forward = a.kind == ActionKind::kRecvF;
    Pending p;
    p.buffer.resize(floats(forward ? a.stage - 1 : a.stage));
    const int peer = pipeline::RankOfStage(kind, shape, forward ? a.stage - 1 : a.stage + 1);
    STRATA_ASSIGN_OR_RETURN(p.request, comm->IRecv(p.buffer.data(), p.buffer.size(), peer, tag(forward, a.stage, a.micro)));
    recvs.emplace(std::make_tuple(forward, a.stage, a.micro), std::move(p));
  }
  auto take = [&](bool forward, int stage, int micro) -> Status {
    auto it = recvs.find({forward, stage, micro});
    if (it == recvs.end()) return Status::OK();  // the neighbouring stage is on this rank
    Status s = it->second.request->Wait();
    recvs.erase(it);
    return s;
  };
  for (const Action& a : actions) {
    switch (a.kind) {
      case ActionKind::kRecvF:
      case ActionKind::kRecvB:
        break;
      case ActionKind::kSendF:
      case ActionKind::kSendB: {
        const bool forward = a.kind == ActionKind::kSendF;
        Pending p;
        p.buffer.resize(floats(forward ? a.stage : a.stage - 1));
        const int to = forward ? a.stage + 1 : a.stage - 1;
        STRATA_ASSIGN_OR_RETURN(p.request, comm->ISend(p.buffer.data(), p.buffer.size(),
                                                      pipeline::RankOfStage(kind, shape, to), tag(forward, to, a.micro)));
        sends.push_back(std::move(p));
        break;
      }
      case ActionKind::kForward:
        if (a.stage > 0) STRATA_RETURN_IF_ERROR(take(true, a.stage, a.micro));
        if (work != nullptr) {
          STRATA_RETURN_IF_ERROR(work->Forward(a.stage, a.micro));
        } else {
          SpinCpu(step.compute.F(a.stage));
          Wait(At(step.f_wait, a.stage));  // a work's own collectives take their time
        }
        break;
      case ActionKind::kBackward:
      case ActionKind::kBackwardInput:
        if (a.stage + 1 < stages) STRATA_RETURN_IF_ERROR(take(false, a.stage, a.micro));
        if (work != nullptr) {
          STRATA_RETURN_IF_ERROR(work->Backward(a.stage, a.micro, a.kind == ActionKind::kBackward));
        } else {
          SpinCpu(a.kind == ActionKind::kBackward ? step.compute.B(a.stage) : step.compute.I(a.stage));
          Wait(At(step.b_wait, a.stage));
        }
        break;
      case ActionKind::kBackwardWeight:
        if (work != nullptr) {
          STRATA_RETURN_IF_ERROR(work->BackwardWeight(a.stage, a.micro));
        } else {
          SpinCpu(step.compute.W(a.stage));
        }
        break;
    }
  }
  for (Pending& p : sends) STRATA_RETURN_IF_ERROR(p.request->Wait());
  if (!recvs.empty()) return Status::Internal("pipeline replay: rank " + std::to_string(rank) + " left receives unused");
  return Status::OK();
}

// The step after the pipeline, as Trainer::TrainStep and its optimizer step run it.
Status RankTail(Communicator* pp, Communicator* dp, Communicator* tp, const PipelineStepCosts& step, int rank,
                ReplayWork* work, std::vector<float>& grads, std::vector<float>& shard) {
  const int64_t bytes = rank < static_cast<int>(step.grad_bytes.size()) ? step.grad_bytes[rank] : 0;
  const bool sync = dp != nullptr && dp->size() > 1 && bytes > 0;
  size_t per_rank = 0;
  if (sync) {
    per_rank = static_cast<size_t>((bytes / 4 + dp->size() - 1) / dp->size());
    grads.resize(per_rank * static_cast<size_t>(dp->size()));
    shard.resize(per_rank);
    if (step.zero > 0) {
      STRATA_RETURN_IF_ERROR(dp->ReduceScatter(grads.data(), shard.data(), per_rank, ReduceOp::kSum));
    } else {
      STRATA_RETURN_IF_ERROR(dp->AllReduce(grads.data(), grads.size(), ReduceOp::kSum));
    }
  }
  for (char g : step.scalars) {
    Communicator* c = g == 'p' ? pp : g == 't' ? tp : dp;
    if (c == nullptr || c->size() < 2) continue;
    double v = 1;
    STRATA_RETURN_IF_ERROR(c->AllReduceHost(&v, 1, ReduceOp::kSum));
  }
  if (work != nullptr && step.zero == 0) {
    STRATA_RETURN_IF_ERROR(work->Update());
  } else {  // ZeRO's update covers the rank's shard: the calibrated time per parameter
    SpinCpu(step.optimizer_s);
  }
  if (sync && step.zero > 0) STRATA_RETURN_IF_ERROR(dp->AllGather(shard.data(), grads.data(), per_rank));
  return Status::OK();
}

}  // namespace

PipelineReplay::~PipelineReplay() {
  pp_comms_.clear();  // before the nodes they rendezvoused through
  dp_comms_.clear();
  tp_comms_.clear();
  cluster_.reset();
}

Result<std::unique_ptr<PipelineReplay>> PipelineReplay::Start(int pp, int dp, int tp, uint64_t shm_ring_bytes) {
  if (pp < 1 || dp < 1 || tp < 1 || pp * dp * tp < 2) {
    return Status::InvalidArgument("pipeline replay: needs pp, dp and tp >= 1 and two ranks or more, got pp " +
                                   std::to_string(pp) + ", dp " + std::to_string(dp) + ", tp " + std::to_string(tp));
  }
  std::unique_ptr<PipelineReplay> replay(new PipelineReplay(pp, dp, tp));
  const int n = pp * dp * tp;
  STRATA_ASSIGN_OR_RETURN(replay->cluster_, StartInprocTrainers(n));
  replay->pp_comms_.resize(static_cast<size_t>(n));
  replay->dp_comms_.resize(static_cast<size_t>(n));
  replay->tp_comms_.resize(static_cast<size_t>(n));
  std::mutex mu;
  Status failed;
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      const int r = t % pp, copy = t / pp, d = copy / tp, k = copy % tp;
      GlooOptions gloo;
      gloo.shm_ring_bytes = shm_ring_bytes;
      GlooOptions small;  // as the trainer's dp and tp groups: shared memory for their small all-reduces
      small.shm_ring_bytes = shm_ring_bytes > 0 ? kShmAllReduceMaxBytes : 0;
      Node& node = *replay->cluster_->nodes[t];
      Result<std::unique_ptr<Communicator>> pipe =
          pp > 1 ? MakeGlooCommunicator(node, "plan/replay/pp/" + std::to_string(copy), r, pp, gloo)
                 : Result<std::unique_ptr<Communicator>>(std::unique_ptr<Communicator>());
      Result<std::unique_ptr<Communicator>> data =
          dp > 1 ? MakeGlooCommunicator(node, "plan/replay/dp/" + std::to_string(k) + "/" + std::to_string(r), d, dp, small)
                 : Result<std::unique_ptr<Communicator>>(std::unique_ptr<Communicator>());
      Result<std::unique_ptr<Communicator>> tensor =
          tp > 1 ? MakeGlooCommunicator(node, "plan/replay/tp/" + std::to_string(d) + "/" + std::to_string(r), k, tp, small)
                 : Result<std::unique_ptr<Communicator>>(std::unique_ptr<Communicator>());
      std::lock_guard<std::mutex> lock(mu);
      if (pipe.ok() && data.ok() && tensor.ok()) {
        replay->pp_comms_[t] = *std::move(pipe);
        replay->dp_comms_[t] = *std::move(data);
        replay->tp_comms_[t] = *std::move(tensor);
      } else if (failed.ok()) {
        failed = (!pipe.ok() ? pipe.status() : !data.ok() ? data.status() : tensor.status())
                     .WithContext("pipeline replay: thread " + std::to_string(t));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  STRATA_RETURN_IF_ERROR(failed);
  return replay;
}

Result<double> PipelineReplay::Measure(pipeline::ScheduleKind kind, const pipeline::PipelineShape& shape,
                                       const PipelineStepCosts& step, int reps, const ReplayWorkFactory& work) {
  if (shape.pp != pp_) {
    return Status::InvalidArgument("pipeline replay: started for pp " + std::to_string(pp_) + ", asked for pp " +
                                   std::to_string(shape.pp));
  }
  STRATA_RETURN_IF_ERROR(pipeline::Validate(kind, shape));
  std::vector<std::vector<Action>> actions(static_cast<size_t>(pp_));
  for (int r = 0; r < pp_; ++r) {
    STRATA_ASSIGN_OR_RETURN(actions[r], pipeline::BuildActions(kind, shape, r));
  }
  const int threads_n = pp_ * dp_ * tp_;
  reps = std::max(1, reps);
  // One step to warm up, then every thread released together and `reps` steps run back to back
  // as a job runs them: the pipeline, then its tail (the gradient sync, the scalar all-reduces,
  // the optimizer). Ranks leave those collectives at different moments, and the next step
  // starts as they do.
  Clock::time_point released;
  std::barrier sync(threads_n, [&]() noexcept { released = Clock::now(); });
  std::barrier made_all(threads_n);
  std::atomic<bool> work_failed{false};
  // ended[s][t]: when thread t finished step s.
  std::vector<std::vector<Clock::time_point>> ended(static_cast<size_t>(reps),
                                                    std::vector<Clock::time_point>(static_cast<size_t>(threads_n)));
  std::mutex mu;
  Status failed;
  std::vector<std::thread> threads;
  for (int t = 0; t < threads_n; ++t) {
    threads.emplace_back([&, t] {
      const int rank = t % pp_;
      std::vector<float> grads, shard;
      std::unique_ptr<ReplayWork> mine;
      auto one_step = [&]() -> Status {
        STRATA_RETURN_IF_ERROR(RankStep(pp_comms_[t].get(), kind, shape, actions[rank], step, rank, mine.get()));
        return RankTail(pp_comms_[t].get(), dp_comms_[t].get(), tp_comms_[t].get(), step, rank, mine.get(), grads,
                        shard);
      };
      Status st;
      if (work) {
        Result<std::unique_ptr<ReplayWork>> made = work(rank, tp_comms_[t].get());
        if (made.ok()) {
          mine = *std::move(made);
        } else {
          st = made.status();
          std::lock_guard<std::mutex> lock(mu);  // the cause, reported before the others' aborts
          if (failed.ok()) failed = st.WithContext("pipeline replay, thread " + std::to_string(t) + "'s work");
          work_failed = true;
        }
      }
      made_all.arrive_and_wait();  // nobody sends to a rank that has no work to receive with
      if (st.ok() && work_failed) st = Status::Aborted("another rank's work could not be made");
      if (st.ok()) st = one_step();
      sync.arrive_and_wait();  // arrived even after a failure: nobody is stranded
      for (int s = 0; s < reps; ++s) {
        if (st.ok()) st = one_step();
        ended[s][t] = Clock::now();
      }
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (failed.ok()) failed = st.WithContext("pipeline replay, thread " + std::to_string(t));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  STRATA_RETURN_IF_ERROR(failed);
  // A step's time: from the slowest thread's end of the one before to its end of this one (as
  // strata-bench plan reads a job: the slowest rank's step), the median over the steps.
  std::vector<double> steps;
  Clock::time_point before = released;
  for (int s = 0; s < reps; ++s) {
    const Clock::time_point end = *std::max_element(ended[s].begin(), ended[s].end());
    steps.push_back(std::chrono::duration<double>(end - before).count());
    before = end;
  }
  std::sort(steps.begin(), steps.end());
  return steps[steps.size() / 2];
}

Result<std::vector<double>> ReplayPipelines(const std::vector<PipelineReplayRequest>& requests, uint64_t shm_ring_bytes,
                                            double budget_s, int passes) {
  passes = std::max(1, passes);
  std::map<std::tuple<int, int, int>, std::vector<size_t>> groups;  // (pp, dp, tp) -> requests
  for (size_t i = 0; i < requests.size(); ++i) {
    groups[{requests[i].shape.pp, requests[i].dp, requests[i].tp}].push_back(i);
  }
  std::vector<std::pair<std::tuple<int, int, int>, std::vector<size_t>>> order(groups.begin(), groups.end());
  std::vector<std::vector<double>> figures(requests.size());
  for (int pass = 0; pass < passes; ++pass) {
    for (auto& [group, indices] : order) {
      const auto [pp, dp, tp] = group;
      STRATA_ASSIGN_OR_RETURN(std::unique_ptr<PipelineReplay> replay, PipelineReplay::Start(pp, dp, tp, shm_ring_bytes));
      // Warm-up, not measured: the group's first plan for about kReplayWarmupS. On this host a
      // replay's first fraction of a second runs 15-30% slow (as a job's first steps do), and
      // which plans met it depended on how many shared their group: 3 gpt plans replayed alone
      // (strata-plan --only) came out 15-30% above their replays among 366.
      const PipelineReplayRequest& first = requests[indices.front()];
      const int warm = std::clamp(static_cast<int>(kReplayWarmupS / std::max(1e-6, first.simulated_s)), 2, 50);
      STRATA_RETURN_IF_ERROR(replay->Measure(first.kind, first.shape, first.costs, warm, first.work).status());
      for (size_t i : indices) {
        const PipelineReplayRequest& r = requests[i];
        const int reps = std::clamp(static_cast<int>(budget_s / passes / std::max(1e-6, r.simulated_s)), 2, 15);
        STRATA_ASSIGN_OR_RETURN(double seconds, replay->Measure(r.kind, r.shape, r.costs, reps, r.work));
        figures[i].push_back(seconds);
      }
    }
    // The next pass the other way round: a drift of the host's speed falls on every plan alike.
    std::reverse(order.begin(), order.end());
    for (auto& [group, indices] : order) std::reverse(indices.begin(), indices.end());
  }
  std::vector<double> out;
  for (std::vector<double>& f : figures) {
    std::sort(f.begin(), f.end());
    out.push_back(f.empty() ? 0.0 : f[f.size() / 2]);
  }
  return out;
}

}  // namespace strata
