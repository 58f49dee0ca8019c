// unit_replay.cc: UnitReplayWork.
#include "trainer/auto/unit_replay.h"

#include <map>
#include <memory>
#include <utility>

#include "common/allocator.h"
#include "trainer/data.h"
#include "trainer/models/model.h"
#include "trainer/nn/tp_group.h"
#include "trainer/ops/ops.h"
#include "trainer/optim.h"
#include "trainer/parallel/plan.h"

namespace strata {
namespace {

// One pipeline rank's stages, as StageExecutor runs them: a Context per (stage, micro-batch)
// from its F to its backward's end, the loss head on the last stage. What crosses a stage
// boundary is a tensor filled once (the replay's hand-offs carry the bytes; their values do not
// change what the compute costs).
class UnitWork final : public ReplayWork {
 public:
  static Result<std::unique_ptr<ReplayWork>> Make(const TrainJob& job, const ops::Exec& base, const ParallelPlan& plan,
                                                  const std::vector<int>& stages, const Batch& sample,
                                                  Communicator* tp) {
    std::unique_ptr<UnitWork> w(new UnitWork(plan));
    w->exec_ = base;
    w->exec_.allocator = &w->alloc_;  // one allocator a rank, as each trainer process has its own
    try {
      STRATA_ASSIGN_OR_RETURN(w->model_, CreateRecomputingModel(job.model, job.parallel.recompute, w->exec_,
                                                                UnitsOfStages(plan, stages), nn::TpGroup{tp, false}));
      w->optimizer_ = Optimizer::Create(job.optimizer, w->model_->params());
      w->lr_ = job.optimizer.lr;
      w->batch_ = w->model_->ToDevice(sample);
      for (int s : stages) {
        const UnitRange r = plan.stages[s];
        if (r.first > 0) {
          Tensor x = ops::NewTensor(w->exec_, w->model_->OutputShape(r.first - 1, w->batch_));
          ops::Fill(w->exec_, x, 0.01f);
          w->inputs_[s] = x;
        }
        if (s + 1 < plan.shape().num_stages()) {
          Tensor dy = ops::NewTensor(w->exec_, w->model_->OutputShape(r.last - 1, w->batch_));
          ops::Fill(w->exec_, dy, 0.01f);
          w->grads_[s] = dy;
        }
      }
    } catch (const ops::OutOfMemory& oom) {
      return oom.status();
    }
    return std::unique_ptr<ReplayWork>(std::move(w));
  }

  ~UnitWork() override {
    contexts_.clear();  // every tensor back to alloc_ before it goes
    inputs_.clear();
    grads_.clear();
    batch_ = Batch();
    optimizer_.reset();
    model_.reset();
  }

  Status Forward(int stage, int micro) override {
    return Guard([&] {
      auto ctx = std::make_unique<nn::Context>(exec_, true, static_cast<uint64_t>(micro));
      auto in = inputs_.find(stage);
      Tensor out = model_->ForwardUnits(plan_.stages[stage], batch_, in == inputs_.end() ? Tensor() : in->second, *ctx);
      if (Last(stage)) {
        model_->loss_head().Forward(out, batch_.target, *ctx, 1.0f / static_cast<float>(plan_.micro_batches));
      }
      contexts_[{stage, micro}] = std::move(ctx);
    });
  }

  Status Backward(int stage, int micro, bool full) override {
    return Guard([&] {
      auto it = contexts_.find({stage, micro});
      STRATA_CHECK(it != contexts_.end());  // the schedule's F comes first (pipeline::Validate)
      nn::Context& ctx = *it->second;
      Tensor dy = Last(stage) ? model_->loss_head().Backward(ctx) : grads_.at(stage);
      model_->BackwardUnits(plan_.stages[stage], dy, ctx, full ? BackwardPart::kFull : BackwardPart::kInput);
      if (full) contexts_.erase(it);
    });
  }

  Status BackwardWeight(int stage, int micro) override {
    return Guard([&] {
      auto it = contexts_.find({stage, micro});
      STRATA_CHECK(it != contexts_.end());
      model_->BackwardWeightUnits(plan_.stages[stage], *it->second);
      contexts_.erase(it);
    });
  }

  Status Update() override {
    return Guard([&] {
      norm_ += GradSquaredSum(model_->params());
      optimizer_->Step(lr_);
      model_->params().ZeroGrad();
    });
  }

 private:
  explicit UnitWork(const ParallelPlan& plan) : plan_(plan) {}

  bool Last(int stage) const { return stage + 1 == plan_.shape().num_stages(); }

  template <typename F>
  Status Guard(F&& f) {
    try {
      f();
    } catch (const ops::OutOfMemory& oom) {
      return oom.status();
    }
    return Status::OK();
  }

  const ParallelPlan plan_;
  AlignedHostAllocator alloc_;
  ops::Exec exec_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  double lr_ = 0;
  double norm_ = 0;  // summed so that the norm's pass is not optimised away
  Batch batch_;
  std::map<int, Tensor> inputs_, grads_;  // by stage: what its neighbours would hand it
  std::map<std::pair<int, int>, std::unique_ptr<nn::Context>> contexts_;  // (stage, micro)
};

}  // namespace

Result<ReplayWorkFactory> UnitReplayWork(const TrainJob& job, const ops::Exec& exec, const PlanChoice& c, int world) {
  if (exec.is_cuda()) return Status::InvalidArgument("unit replay: runs on the CPU only (a replay is for shared cores)");
  const TrainJob planned = ApplyChoice(job, c);
  STRATA_ASSIGN_OR_RETURN(ParallelPlan plan, ResolvePlan(planned, world));
  if (plan.cp != 1) {  // the planner does not enumerate it; a job may set it
    return Status::InvalidArgument("unit replay: plan " + c.ToString() + " has context parallelism (cp " +
                                   std::to_string(plan.cp) + ")");
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> data, CreateDataSource(job.data, job.model, c.micro_batch, {0, 1}));
  auto sample = std::make_shared<const Batch>(data->Next());
  const pipeline::ScheduleKind kind = c.schedule;
  const int tp = plan.tp;
  return ReplayWorkFactory([planned, plan, sample, exec, kind, tp](int pp_rank, Communicator* comm)
                               -> Result<std::unique_ptr<ReplayWork>> {
    if (tp > 1 && (comm == nullptr || comm->size() != tp)) {
      return Status::InvalidArgument("unit replay: plan has tp " + std::to_string(tp) + ", the replay's tp group " +
                                     std::to_string(comm ? comm->size() : 1));
    }
    const std::vector<int> stages = pipeline::StagesOfRank(kind, plan.shape(), pp_rank);
    return UnitWork::Make(planned, exec, plan, stages, *sample, tp > 1 ? comm : nullptr);
  });
}

}  // namespace strata
