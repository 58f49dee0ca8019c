// trainer.cc: building a trainer for its place in the plan, the step loop and evaluation.
#include "trainer/trainer.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cluster/node.h"
#include "trainer/checkpoint.h"
#include "trainer/data_split.h"
#include "trainer/comm/gloo_communicator.h"
#include "trainer/device.h"
#include "trainer/elastic_split.h"
#include "trainer/grad_sync.h"
#include "trainer/ps_sync.h"
#include "trainer/ops/ops.h"
#include "trainer/ops/rng.h"
#include "trainer/pipeline/executor.h"
#include "trainer/pipeline/measured.h"
#include "trainer/parallel/unit_costs.h"
#include "trainer/progress.h"
#include "trainer/sharded_optim.h"
#include "trainer/trace.h"
#include "trainer/zero3.h"
#if STRATA_HAVE_CUDA
#include "common/cuda_check.h"
#include "trainer/comm/nccl_communicator.h"
#endif

namespace strata {

Trainer::Trainer(const TrainJob& job) : job_(job) {}

Trainer::~Trainer() {
  // The communication thread goes first; the model's tensors before the allocator and stream
  // they live on.
  executor_.reset();
  if (model_) model_->set_unit_hooks(nullptr);
  reducer_.reset();
  zero3_.reset();  // unhooks itself from the model
  ps_.reset();
  client_.reset();
  groups_ = ParallelGroups();
  eval_set_.clear();
  lookahead_.clear();
  optimizer_.reset();
  model_.reset();
}

namespace {

// Ids one sample feeds to the embedding tables (what a compact sparse table must hold).
int64_t IdsPerSample(const ModelOptions& m) {
  switch (m.kind) {
    case ModelOptions::Kind::kCtr: return m.fields;
    case ModelOptions::Kind::kGpt: return m.context;
    case ModelOptions::Kind::kMlp: return 0;
  }
  return 0;
}

// Runs f, returning an ops::OutOfMemory thrown inside it as its ResourceExhausted Status with
// what was being done and what the job can change.
// Also turns a tensor-parallel collective that failed inside a layer (nn::CollectiveFailed: a
// dead peer, a timeout) back into its Status.
template <typename Doing, typename F>
auto CatchOutOfMemory(Doing&& doing, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ops::OutOfMemory& e) {
    return Status::ResourceExhausted(
        std::string(doing()) + ": out of memory allocating " + e.status().message() +
        " (lower train.batch_size, raise train.micro_batches, set parallel.recompute, raise "
        "parallel.pp or parallel.tp, or shrink the model)");
  } catch (const nn::CollectiveFailed& e) {
    return e.status().WithContext(doing());
  }
}

}  // namespace

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainJob& job, Node* node, bool launched) {
  return CatchOutOfMemory([] { return "building the model"; }, [&] { return Build(job, node, launched); });
}

Result<TrainSummary> Trainer::Run() {
  if (job_.infer.enabled()) {
    return CatchOutOfMemory([] { return "inference"; }, [this] { return RunInference(); });
  }
  return CatchOutOfMemory([this] { return "training, step " + std::to_string(step_ + 1); },
                          [this] { return RunSteps(); });
}

Result<std::unique_ptr<Trainer>> Trainer::Build(const TrainJob& job, Node* node, bool launched) {
  auto t = std::unique_ptr<Trainer>(new Trainer(job));
  const SyncOptions& sync = job.sync;
  const bool cluster = sync.mode != SyncOptions::Mode::kLocal;
  if (cluster) {
    if (!node) return Status::InvalidArgument(std::string("sync.mode ") + ModeName(sync.mode) + " needs a cluster (strata-launch, or --set cluster.scheduler=...)");
    t->node_ = node;
    t->rank_ = node->rank();
    t->world_ = node->view().Count(Role::kTrainer);
    if (t->rank_ < 0 || t->rank_ >= t->world_) {
      return Status::Internal("trainer rank " + std::to_string(t->rank_) + " of " + std::to_string(t->world_));
    }
    const bool offload = sync.mode == SyncOptions::Mode::kOffload;
    // ps and hybrid: the trainers stop at the checkpoint and the servers write their tables into
    // it (any consistency). offload's checkpoint holds the weights its pulls bring, the same on
    // every trainer only under bsp.
    if (job.train.checkpoint_every > 0 && offload && sync.consistency != Consistency::kBsp) {
      return Status::InvalidArgument(
          "train.checkpoint_every: sync.mode offload checkpoints need sync.consistency bsp; otherwise use the "
          "servers' durability (server.store.durability)");
    }

  }
  if (job.parallel.zero > 0 && cluster && sync.mode != SyncOptions::Mode::kAllReduce) {
    return Status::InvalidArgument(std::string("parallel.zero ") + std::to_string(job.parallel.zero) +
                                   " shards the optimizer over the all-reduce replicas: it needs sync.mode "
                                   "allreduce (sync.mode is " + ModeName(sync.mode) + ")");
  }
  if (job.infer.enabled() && sync.mode == SyncOptions::Mode::kOffload) {
    return Status::InvalidArgument("infer.mode with sync.mode offload is not built (sync.mode local, allreduce, or "
                                   "ps and hybrid, whose servers serve the checkpoint's tables)");
  }
  // Elastic: the plan is the job's first trainers', whose batch slice every trainer reads;
  // trainers that joined later add slices (trainer_elastic.cc).
  const bool elastic = cluster && node->options().cluster.elastic;
  const int plan_world = elastic ? std::max(1, node->options().cluster.trainers) : t->world_;
  STRATA_ASSIGN_OR_RETURN(t->plan_, ResolvePlan(job, plan_world));
  if (elastic) {
    STRATA_RETURN_IF_ERROR(t->CheckElastic());
    t->elastic_ = std::make_shared<ElasticSplit>(*node, t->plan_.micro_batches, kElasticLeaseSteps);
  }
  if (!cluster && t->plan_.pp > 1) {
    return Status::InvalidArgument("parallel.pp " + std::to_string(t->plan_.pp) +
                                   " needs a cluster of trainers (strata-launch --trainers N)");
  }
  if (t->plan_.cp > 1 && UsesServers(sync.mode) && sync.consistency != Consistency::kBsp) {
    // The cp ranks each hold a part of every sample's gradient: only a BSP clock sums them
    // (with the replicas') before the servers apply an update.
    return Status::InvalidArgument("parallel.cp " + std::to_string(t->plan_.cp) + " with sync.mode " +
                                   ModeName(sync.mode) + " needs sync.consistency bsp: each cp rank pushes a part "
                                   "of every sample's gradient, which only a BSP clock combines");
  }
  if (job.train.batch_size % t->plan_.dp != 0) {
    return Status::InvalidArgument("train.batch_size " + std::to_string(job.train.batch_size) +
                                   " (the global micro-batch) must be divisible by the " +
                                   std::to_string(t->plan_.dp) + " data-parallel replicas");
  }
  STRATA_ASSIGN_OR_RETURN(t->device_, ComputeDevice::Open(job.train.device, cluster, t->rank_, job.train.memory_limit_mb,
                                                               job.train.local_task, job.train.Matmul(),
                                                               job.train.Saved()));
  const ops::Exec& exec = t->device_->exec();
  if (job.parallel.partition == "cost" && t->plan_.stages.size() > 1) {
    STRATA_ASSIGN_OR_RETURN(std::vector<double> costs, t->SharedUnitCosts());
    STRATA_ASSIGN_OR_RETURN(t->plan_, ResolvePlan(job, plan_world, costs));
  }
  t->trace_ = std::make_unique<Trace>(!sync.trace_path.empty());
  if (cluster) STRATA_RETURN_IF_ERROR(t->MakeGroups());

  // This rank builds the units of its stages only.
  const std::vector<int> stages = pipeline::StagesOfRank(t->plan_.schedule, t->plan_.shape(), t->groups_.pp_rank);
  const int64_t local_batch = job.train.batch_size / t->plan_.dp;
  ModelOptions model = job.model;
  if (SparseOnServers(job)) model.sparse_rows = local_batch * t->plan_.micro_batches * IdsPerSample(job.model);
  STRATA_ASSIGN_OR_RETURN(t->model_, CreateRecomputingModel(model, job.parallel.recompute, exec,
                                                            UnitsOfStages(t->plan_, stages),
                                                            nn::TpGroup{t->groups_.tp.get(), job.parallel.sequence_parallel},
                                                            nn::CpGroup{t->groups_.cp.get()}));
  if (cluster) STRATA_RETURN_IF_ERROR(t->Connect());
  if (job.infer.enabled()) {
    // No optimizer and no gradient synchronisation: parameters come from the checkpoint.
  } else if (ShardedBuckets* shards = t->zero3_ ? static_cast<ShardedBuckets*>(t->zero3_.get())
                         : t->reducer_ && t->reducer_->zero() > 0 ? t->reducer_.get() : nullptr) {
    auto sharded = std::make_unique<ShardedOptimizer>(job.optimizer, *shards);
    t->sharded_ = sharded.get();
    t->optimizer_ = std::move(sharded);
  } else {
    if (job.parallel.zero > 0 && t->rank_ == 0) {
      spdlog::info("parallel.zero {}: one data-parallel replica, nothing to shard (runs as ZeRO-0)", job.parallel.zero);
    }
    t->optimizer_ = Optimizer::Create(job.optimizer, t->model_->params());
  }
  STRATA_ASSIGN_OR_RETURN(t->data_, CreateDataSource(job.data, job.model, job.train.batch_size,
                                                     {t->groups_.dp_rank, t->plan_.dp, t->elastic_}));
  if (t->plan_.cp > 1) {
    // Each context-parallel rank reads its chunks of every sample (data_split.h).
    const int64_t length = job.model.kind == ModelOptions::Kind::kGpt ? job.model.context : job.data.seq_len;
    t->data_ = SplitSamples(std::move(t->data_), static_cast<int>(job.data.shard_axis),
                            ContextChunks(job.model, length, t->plan_.cp, t->groups_.cp_rank));
  }
  // Under ZeRO-3 every replica takes part in evaluation's forwards (they gather parameters);
  // under context parallelism every cp rank of the first replica (the ring needs them all).
  if (t->groups_.dp_rank == 0 || t->zero3_) t->eval_set_ = t->data_->EvalSet(local_batch);
  // An elastic trainer is rank 0 of its own replica of the plan (trainer_connect.cc).
  t->executor_ = std::make_unique<pipeline::StageExecutor>(*t->model_, t->plan_, t->elastic_ ? 0 : t->rank_,
                                                           t->groups_.pp.get(), t->trace_.get());
  if (job.data.kind == DataOptions::Kind::kText) {
    // The bar a language model must clear: a model without context reaches this loss at best.
    std::ifstream in(job.data.path, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    t->unigram_entropy_ = UnigramEntropy(bytes);
    if (t->rank_ == 0) {
      spdlog::info("{}: {} bytes, byte-unigram entropy {:.4f} nats", job.data.path, bytes.size(),
                   t->unigram_entropy_);
    }
  }
  t->comm_ = CommAccounting(t->groups_);
  if (t->rank_ == 0 && t->plan_.world > 1) spdlog::info("parallel plan: {}", t->plan_.ToString());
  t->progress_ = std::make_unique<Progress>(job, t->rank_, t->world_, launched);
  STRATA_RETURN_IF_ERROR(t->progress_->Open());
  return t;
}

std::vector<Batch> Trainer::NextBatches() {
  if (!lookahead_.empty()) return std::move(lookahead_);
  std::vector<Batch> batches;
  for (int m = 0; m < plan_.micro_batches; ++m) batches.push_back(data_->Next());
  return batches;
}

Status Trainer::ReduceLoss(double* v) {
  Trace::Scope scope(trace_.get(), "loss all-reduce", "comm", 0, step_);
  if (groups_.pp) STRATA_RETURN_IF_ERROR(groups_.pp->AllReduceHost(v, 1, ReduceOp::kSum).WithContext("summing the loss over " + PipelineTrainers()));
  if (groups_.dp) {
    STRATA_RETURN_IF_ERROR(groups_.dp->AllReduceHost(v, 1, ReduceOp::kAvg).WithContext("averaging the loss over the replicas"));
  } else if (groups_.cp) {
    // Replicas that meet only on the servers still share each sample's loss over their cp ranks.
    STRATA_RETURN_IF_ERROR(groups_.cp->AllReduceHost(v, 1, ReduceOp::kAvg).WithContext("averaging the loss over the context-parallel ranks"));
  }
  return Status::OK();
}

Result<double> Trainer::TrainStep() {
  const int micro = plan_.micro_batches;
  std::vector<Batch> batches = NextBatches();
  lookahead_.clear();
  if (micro_batch_.empty()) micro_batch_ = model_->LeadingShape(batches.front());
  // Elastic: the next step's batch is read ahead only where this trainer is in its split.
  const bool prefetch = ps_ && job_.sync.prefetch && (!elastic_ || elastic_->Member(step_ + 1));
  if (ps_) {
    STRATA_RETURN_IF_ERROR(ps_->Prepare(batches, step_));
    if (prefetch && ps_->prefetch_before_compute()) {
      lookahead_ = NextBatches();
      ps_->Prefetch(lookahead_);
    }
  }
  // BeginStep first: under ZeRO-2 it makes the gradient buffers ZeroGrad then clears.
  for (GradSync* s : syncs_) s->BeginStep(step_);
  model_->params().ZeroGrad();
  nn::Context::GradReadyFn ready;
  const bool sequence = groups_.tp && job_.parallel.sequence_parallel;
  if (!syncs_.empty() || sequence) {
    ready = [this, sequence](nn::Parameter& p) {
      // Sequence parallelism: a norm's gradient is final now but covers this rank's slice of
      // the sequence; summed over the tp group before anything else reads it (Megatron sums
      // these after the data-parallel reduction; before it, the servers see whole gradients).
      if (sequence && p.sequence_partial) nn::TpAllReduce(nn::TpGroup{groups_.tp.get()}, p.grad, ReduceOp::kSum, p.name);
      for (GradSync* s : syncs_) s->GradReady(p);
    };
  }
  // Dropout masks depend on (step, micro-batch, replica, cp rank) only, so a resumed run draws
  // the same.
  const int dp = plan_.dp, dp_rank = groups_.dp_rank, cp = plan_.cp, cp_rank = groups_.cp_rank;
  auto seed_of = [&](int m) {
    return rng::Hash(job_.model.seed, ((step_ * micro + m) * dp + dp_rank) * cp + cp_rank);
  };
  double loss = 0;
  {
    Trace::Scope fb(trace_.get(), "forward + backward", "compute", 0, step_);
    STRATA_ASSIGN_OR_RETURN(loss, executor_->RunStep(batches, step_, ready, seed_of));
  }
  const pipeline::StepTimings& t = executor_->last_step();
  pipeline_.step_seconds += t.step_us * 1e-6;
  pipeline_.busy_seconds += t.busy_us * 1e-6;
  pipeline_.peak_saved_bytes = std::max(pipeline_.peak_saved_bytes, t.peak_saved_bytes);
  pipeline_.peak_live = std::max(pipeline_.peak_live, t.peak_live);
  if (plan_.pp > 1) {
    // Every pipeline step's own timings (strata-bench pipeline reads them back).
    nlohmann::json actions = nlohmann::json::array();
    for (const pipeline::TimedAction& a : t.actions) actions.push_back({pipeline::ToString(a.action), a.start, a.end});
    progress_->Metrics(nlohmann::json{{"step", step_ + 1},
                                      {"pipeline", {{"pp_rank", groups_.pp_rank}, {"dp_rank", groups_.dp_rank},
                                                    {"step_us", t.step_us}, {"busy_us", t.busy_us},
                                                    {"peak_saved_bytes", t.peak_saved_bytes},
                                                    {"peak_live", t.peak_live}, {"actions", actions}}}}
                           .dump());
  }
  for (GradSync* s : syncs_) STRATA_RETURN_IF_ERROR(s->Finish(step_));
  // Summed in double over the micro-batches, reduced in double, divided once: as one process.
  STRATA_RETURN_IF_ERROR(ReduceLoss(&loss));
  loss /= micro;
  if (ps_ && prefetch && !ps_->prefetch_before_compute()) {
    lookahead_ = NextBatches();
    ps_->Prefetch(lookahead_);
  }
  return loss;
}

std::string Trainer::PipelineTrainers() const {
  std::string out = "the pipeline of trainers";
  for (int r : plan_.mesh.GroupOf(rank_, "pp")) out += " " + std::to_string(r);
  return out;
}

Result<double> Trainer::ClipGradients() {
  // ps and offload clip on the servers, by the norm over every stage's tables (PsSync::Finish).
  if (ps_ && ps_->clips()) return ps_->grad_norm();
  Trace::Scope scope(trace_.get(), "gradient norm", "comm", 0, step_);
  nn::ParameterRegistry& reg = model_->params();
  // Each element counted once: a tensor-parallel shard's squares are summed over the tp group,
  // a parameter whole on every tp rank (norms, biases of row-split layers) counted as is.
  // Under ZeRO each dp rank holds its slices of the averaged gradients: summed over dp first.
  double sums[2] = {0, 0};  // whole, split
  if (sharded_) {
    sums[0] = sharded_->GradSquaredSum(/*split=*/false);
    sums[1] = sharded_->GradSquaredSum(/*split=*/true);
    STRATA_RETURN_IF_ERROR(groups_.dp->AllReduceHost(sums, 2, ReduceOp::kSum)
                               .WithContext("summing the gradient norm over the data-parallel shards"));
  } else {
    sums[0] = GradSquaredSum(reg, /*split=*/false);
    sums[1] = GradSquaredSum(reg, /*split=*/true);
  }
  double sq = sums[0];
  if (groups_.tp) {
    double split = sums[1];
    STRATA_RETURN_IF_ERROR(groups_.tp->AllReduceHost(&split, 1, ReduceOp::kSum)
                               .WithContext("summing the gradient norm over the tensor-parallel group"));
    sq += split;
  } else {
    sq += sums[1];
  }
  // Each pipeline rank holds its stages' gradients; replicas already agree after all-reduce.
  if (groups_.pp) {
    STRATA_RETURN_IF_ERROR(groups_.pp->AllReduceHost(&sq, 1, ReduceOp::kSum)
                               .WithContext("summing the gradient norm over " + PipelineTrainers()));
  }
  const double norm = std::sqrt(sq);
  const double max_norm = job_.optimizer.clip_norm;
  if (max_norm > 0 && norm > max_norm) {
    const auto scale = static_cast<float>(max_norm / (norm + 1e-6));
    if (sharded_) {
      sharded_->ScaleGrads(scale);
    } else {
      ScaleGrads(reg, scale);
    }
  }
  return norm;
}

Status Trainer::Finish() {
  // Every trainer has pushed its last gradients before the evaluation.
  const Millis timeout(job_.sync.timeout_ms);
  const std::string done_key = "train/done/";
  STRATA_RETURN_IF_ERROR(node_->KvSet(done_key + std::to_string(rank_), "1").WithContext("saying this trainer is done"));
  Status s = node_->Barrier("train/done", wire::BarrierScope::TRAINERS, timeout);
  if (s.ok()) return s;
  // Asynchronous training, and an elastic job (whose servers' clocks go on without a dead
  // trainer, docs/reliability.md), finish without the dead; a fixed BSP or SSP job cannot have.
  if (!(ps_ && (job_.sync.consistency == Consistency::kAsp || node_->options().cluster.elastic))) {
    return s.WithContext("waiting for the other trainers to finish");
  }
  spdlog::warn("not every trainer finished ({}); the job finishes without it", s.ToString());
  if (rank_ != 0) return Status::OK();
  // The barrier fails as soon as one member is dead, but trainer 0 ends the job after this:
  // it waits for every trainer still alive to say it is done, so none is cut off mid-step.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int r = 1; r < world_; ++r) {
    while (!node_->KvGet(done_key + std::to_string(r), Millis(200)).ok()) {
      const ClusterView view = node_->view();
      const NodeInfo* n = view.Find(Role::kTrainer, r);
      if (!n || !n->alive) break;  // lost: nothing to wait for
      if (std::chrono::steady_clock::now() > deadline) {
        return Status::DeadlineExceeded("trainer " + std::to_string(r) + " did not finish within sync.timeout_ms");
      }
    }
  }
  return Status::OK();
}

Result<TrainSummary> Trainer::RunSteps() {
  const TrainOptions& to = job_.train;
  if (to.resume && !to.checkpoint_dir.empty()) {
    const std::string latest = LatestCheckpoint(to.checkpoint_dir);
    if (!latest.empty() && ps_ && !ps_->offload()) {
      // The servers would have to load the tables with their optimizer state, and take pushes.
      return Status::FailedPrecondition(
          "train.resume: " + latest + " exists, and resuming sync.mode " + ModeName(job_.sync.mode) +
          " training from a checkpoint is not built (its server tables serve inference: infer.checkpoint); set "
          "train.resume false or use the servers' durability (server.store.durability)");
    }
    if (!latest.empty() && job_.sync.mode == SyncOptions::Mode::kOffload) {
      // An offload checkpoint holds the weights (for inference on any layout), not the
      // optimizer state, which is the servers'.
      return Status::FailedPrecondition(
          "train.resume: " + latest + " exists, and under sync.mode offload the servers hold the optimizer "
          "state: restart them from their durability (server.store.durability), or set train.resume false");
    }
    if (!latest.empty()) {
      STRATA_RETURN_IF_ERROR(LoadCheckpoint(latest));
      spdlog::info("resumed from {} at step {}", latest, step_);
    }
  }
  TrainSummary summary;
  summary.first_step = step_;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  double window_start = elapsed();
  if (elastic_) {
    STRATA_RETURN_IF_ERROR(StartElastic());
    summary.first_step = step_;
  }
  comm_.Resume();
  while (step_ < to.steps) {
    if (elastic_) {
      STRATA_ASSIGN_OR_RETURN(const bool go_on, ElasticStep());
      if (!go_on) break;
    } else if (stop_check_) {
      if (Status s = stop_check_(); !s.ok()) {
        return s.WithContext("after step " + std::to_string(step_) + " of " + std::to_string(to.steps));
      }
    }
    const auto step_start = std::chrono::steady_clock::now();
    const double lr = LearningRate(job_.optimizer, step_, to.steps);
    // A step's high-water mark of this device's allocator (LogMemory).
    Allocator& alloc = model_->params().exec().alloc();
    alloc.ResetPeak();
    STRATA_ASSIGN_OR_RETURN(const double loss, TrainStep());
    double norm = 0;
    {
      Trace::Scope opt(trace_.get(), "optimizer", "optim", 0, step_);
      STRATA_ASSIGN_OR_RETURN(norm, ClipGradients());
      optimizer_->Step(lr);
      if (sharded_ && reducer_) STRATA_RETURN_IF_ERROR(reducer_->AllGatherParams());
    }
    comm_.CountStep();
    ++step_;
    progress_->StepTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count());
    // What this rank holds, once every buffer exists, and the second step's peak (the first
    // re-cuts the buckets, old and new alive together): every rank where ranks differ (ZeRO's
    // shards, pipeline stages, tp and cp pieces), else rank 0's.
    const bool ranks_differ = sharded_ || plan_.cp > 1 || plan_.pp > 1 || plan_.tp > 1;
    if (step_ - summary.first_step == std::min<int64_t>(2, to.steps - summary.first_step) && (ranks_differ || rank_ == 0)) {
      LogMemory(alloc.stats().peak_bytes_in_use);
    }
    summary.losses.push_back(loss);
    if (!std::isfinite(loss)) return Status::Aborted("loss is " + std::to_string(loss) + " at step " + std::to_string(step_));
    if (step_ % to.log_every == 0 || step_ == to.steps) {
      const double now = elapsed();
      progress_->Step(step_, loss, lr, norm, (now - window_start) / std::min<int64_t>(to.log_every, step_ - summary.first_step), now);
      window_start = now;
    }
    const bool eval = to.eval_every > 0 && step_ % to.eval_every == 0 && step_ != to.steps;
    const bool checkpoint = to.checkpoint_every > 0 && step_ % to.checkpoint_every == 0;
    if (eval || checkpoint) {
      // Not training traffic: counting pauses once ZeRO-1/2's parameter all-gathers have run
      // (a checkpoint reads every value and uses the dp group on this thread).
      if (reducer_) STRATA_RETURN_IF_ERROR(reducer_->WaitAllParams());
      comm_.Pause();
      if (eval) STRATA_RETURN_IF_ERROR(Evaluate().status());
      if (checkpoint) {
        const auto checkpoint_start = std::chrono::steady_clock::now();
        STRATA_RETURN_IF_ERROR(SaveCheckpoint());
        progress_->CheckpointTime(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - checkpoint_start).count());
      }
      comm_.Resume();
    }
  }
  // ZeRO-1/2: the last step's parameter all-gathers, before the values are read whole and
  // before this trainer's communication thread stops (the other replicas' gathers need it).
  if (reducer_) STRATA_RETURN_IF_ERROR(reducer_->WaitAllParams());
  comm_.Pause();
  summary.seconds = elapsed();
  const int64_t steps_run = step_ - summary.first_step;
  summary.samples_per_second = summary.seconds > 0 ? steps_run * to.batch_size * plan_.micro_batches / summary.seconds : 0;
  progress_->Done();
  if (reducer_) {
    summary.comm_seconds = reducer_->comm_seconds();
    summary.exposed_comm_seconds = reducer_->exposed_seconds();
    summary.gather_seconds = reducer_->gather_seconds();
    summary.exposed_gather_seconds = reducer_->gather_exposed_seconds();
  }
  if (zero3_) {
    summary.comm_seconds = zero3_->reduce_seconds();
    summary.exposed_comm_seconds = zero3_->reduce_exposed_seconds();
    summary.gather_seconds = zero3_->gather_seconds();
    summary.exposed_gather_seconds = zero3_->gather_exposed_seconds();
  }
  if (ps_ && job_.sync.mode == SyncOptions::Mode::kOffload) {
    const PsOverlap o = ps_->overlap();
    summary.push_seconds = o.push_seconds;
    summary.exposed_push_seconds = o.push_exposed_seconds;
    summary.pull_seconds = o.pull_seconds;
    summary.exposed_pull_seconds = o.pull_exposed_seconds;
    summary.unit_pulls = o.unit_pulls;
    summary.early_unit_pulls = o.early_unit_pulls;
  }
  summary.pipeline = pipeline_;
  summary.comm = comm_.Report(ModelCommTraffic(Layout()));
  if (summary.comm.steps > 0 && !summary.comm.groups.empty()) {
    nlohmann::json end = {{"step", step_}, {"comm", CommReportJson(summary.comm)}};
    // The gradient sync's time in collectives and the part of it backward did not hide
    // (strata-bench zero reads them).
    if (reducer_ || zero3_) {
      end["grad_sync"] = {{"comm_seconds", summary.comm_seconds}, {"exposed_seconds", summary.exposed_comm_seconds}};
    }
    if (summary.push_seconds > 0) {
      end["offload"] = {{"push_seconds", summary.push_seconds}, {"push_exposed_seconds", summary.exposed_push_seconds},
                        {"pull_seconds", summary.pull_seconds}, {"pull_exposed_seconds", summary.exposed_pull_seconds},
                        {"unit_pulls", summary.unit_pulls}, {"early_unit_pulls", summary.early_unit_pulls}};
    }
    if (summary.gather_seconds > 0) {
      // ZeRO's parameter all-gathers alone: how much of them ran behind compute.
      end["grad_sync"]["gather_seconds"] = summary.gather_seconds;
      end["grad_sync"]["gather_exposed_seconds"] = summary.exposed_gather_seconds;
    }
    progress_->Metrics(end.dump());
  }
  if (trace_->enabled()) {
    // One file per rank with {rank} in the path; without it rank 0's alone (as the metrics
    // file), rather than every rank racing to replace one file.
    if (rank_ == 0 || job_.sync.trace_path.find("{rank}") != std::string::npos) {
      const std::string path = ForRank(job_.sync.trace_path, rank_);
      STRATA_RETURN_IF_ERROR(trace_->Write(path, rank_));
      spdlog::info("wrote the timeline to {}", path);
    }
    if (plan_.pp > 1 && steps_run > 0) STRATA_RETURN_IF_ERROR(WritePipelineTimeline());
  }
  if (leave_at_ >= 0) {  // left an elastic job: the others finish and evaluate
    spdlog::info("left the job after step {}: the other trainers go on", step_);
    return summary;
  }
  if (node_) STRATA_RETURN_IF_ERROR(Finish());
  STRATA_ASSIGN_OR_RETURN(summary.eval, Evaluate());
  return summary;
}

CommLayout Trainer::Layout() const {
  CommLayout l;
  l.plan = plan_;
  l.pp_rank = groups_.pp_rank;
  l.units = model_->units();
  l.micro_batch = micro_batch_;
  l.dp_all_reduce = reducer_ != nullptr || zero3_ != nullptr;
  if (reducer_ && reducer_->zero() > 0) {
    l.zero = reducer_->zero();
    l.zero_padded_floats = reducer_->padded_floats();
    l.zero_first_padded_floats = reducer_->first_padded_floats();
  }
  if (zero3_) {
    l.zero = 3;
    l.zero_padded_floats = zero3_->padded_floats();
    l.zero_first_padded_floats = l.zero_padded_floats;
    for (int u = 0; u < model_->num_units(); ++u) l.zero3_unit_floats.push_back(zero3_->unit_padded_floats(u));
  }
  l.overlap = job_.sync.overlap;
  l.model = job_.model;
  l.recompute = job_.parallel.recompute;
  l.sequence_parallel = job_.parallel.sequence_parallel;
  l.cp_averages_loss = groups_.cp && !groups_.dp;
  for (const auto& p : model_->params().params()) {
    if (p->remote) {
      l.server_floats += *ShapeNumel(p->shard.LocalShape());  // its value may be released
    } else {
      ++l.all_reduced_tensors;
    }
  }
  return l;
}

Status Trainer::WritePipelineTimeline() {
  // The last step of every pipeline rank of each replica, drawn by the replica's first rank.
  STRATA_ASSIGN_OR_RETURN(auto ranks, pipeline::GatherTimelines(groups_.pp.get(), executor_->last_step().actions));
  if (groups_.pp_rank != 0 || groups_.dp_rank != 0 || groups_.cp_rank != 0) return Status::OK();
  std::string base = job_.sync.trace_path;
  if (const size_t at = base.find("{rank}"); at != std::string::npos) {
    base.replace(at, 6, "pipeline");
  } else {
    base += ".pipeline";
  }
  if (base.size() > 5 && base.ends_with(".json")) base.resize(base.size() - 5);
  STRATA_RETURN_IF_ERROR(pipeline::WritePipelineTimeline(base, plan_.schedule, plan_.shape(), ranks, step_));
  spdlog::info("wrote the pipeline's last step to {}.json and {}.svg (planned above measured)", base, base);
  return Status::OK();
}

}  // namespace strata
