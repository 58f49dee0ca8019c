// trainer.h: Trainer, what strata-trainer runs: the step loop (micro-batches through the
// pipeline executor, gradient synchronisation, clipping, schedule, optimizer), evaluation and
// checkpoints that resume exactly (on the CPU, bit for bit the uninterrupted run). Alone
// (sync.mode local) or as one rank of a cluster cut by the job's `parallel` plan into
// dp x tp x pp: data-parallel replicas synchronise by all-reduce (BucketAllReducer), through the
// parameter servers (PsSync) or both (hybrid); pipeline ranks run a schedule (pipeline/).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trainer/data.h"
#include "trainer/models/model.h"
#include "trainer/optim.h"
#include "trainer/parallel/comm_report.h"
#include "trainer/parallel/groups.h"
#include "trainer/parallel/plan.h"
#include "trainer/train_options.h"

namespace strata {

struct EvalMetrics {
  double loss = 0;         // mean loss over the held-out set
  double auc = -1;         // ctr only
  double oracle_auc = -1;  // ctr on synthetic click logs: AUC of the planted probabilities
  int64_t samples = 0;
};

// What the pipeline executor measured, summed over the steps run (pp > 1).
struct PipelineSummary {
  double step_seconds = 0;  // sum of the executor's step times
  double busy_seconds = 0;  // of which computing
  int64_t peak_saved_bytes = 0;
  int peak_live = 0;
  double bubble() const { return step_seconds > 0 ? 1.0 - busy_seconds / step_seconds : 0; }
};

struct TrainSummary {
  int64_t first_step = 0;       // where this run started (after a resume, the checkpoint's step)
  std::vector<double> losses;   // one per step run, starting at first_step (the mean over the
                                // data-parallel replicas; the same on every rank)
  EvalMetrics eval;             // at the end (rank 0)
  double seconds = 0;           // training, without the final evaluation
  double samples_per_second = 0;  // global samples (every replica's) per second of training
  // All-reduce: seconds spent reducing and the part of it backward did not hide.
  double comm_seconds = 0;
  double exposed_comm_seconds = 0;
  // ZeRO-3's parameter all-gathers: seconds gathering, and the part forward and backward
  // waited for (the rest the prefetch hid behind compute). comm_seconds: its reduce-scatters.
  double gather_seconds = 0;
  double exposed_gather_seconds = 0;
  // sync.mode offload: pushes' and pulls' time in flight (the union of their intervals) and
  // the part the training thread waited for; the rest ran behind compute.
  double push_seconds = 0, exposed_push_seconds = 0;
  double pull_seconds = 0, exposed_pull_seconds = 0;
  int64_t unit_pulls = 0, early_unit_pulls = 0;  // offload: units pulled; of them, during backward
  PipelineSummary pipeline;
  // What each of this trainer's groups moved during the training steps, beside the
  // analytical count for the layout (a cluster run).
  CommReport comm;
};

class Node;
class MetricsRegistry;
struct ShardTensor;
class PsClient;
class ElasticSplit;
class PsSync;
class GradSync;
class BucketAllReducer;
class Zero3Sync;
class ShardedOptimizer;
class ComputeDevice;
class Progress;
class Trace;
namespace pipeline {
class StageExecutor;
}

// Owns the model (this rank's stages of it), optimizer, data and device. Not thread-safe.
class Trainer {
 public:
  // With sync.mode other than local, `node` is this trainer's joined cluster node and every
  // trainer of the cluster takes part. `launched`: under strata-launch (progress as @progress
  // lines). Create and Run return ResourceExhausted when the device runs out of memory.
  static Result<std::unique_ptr<Trainer>> Create(const TrainJob& job, Node* node = nullptr,
                                                 bool launched = false);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Resumes from train.checkpoint_dir/latest when asked and present, then trains to
  // train.steps, checkpointing and evaluating as configured.
  Result<TrainSummary> Run();
  // Asked before every step: an error ends training with it (a signal; a lost scheduler).
  void set_stop_check(std::function<Status()> stop) { stop_check_ = std::move(stop); }
  // On every rank of data-parallel replica 0 (the pipeline passes activations); the loss is
  // known on all of them afterwards. Others return an empty result. May throw
  // ops::OutOfMemory (Run catches it).
  Result<EvalMetrics> Evaluate();

  // Writes train.checkpoint_dir/step-<step>/ (checkpoint.h); every trainer calls it at the
  // same step. The first replica of each (pipeline, tensor-parallel) shard writes its
  // parameters and optimizer state (whole parameters once, by tensor-parallel rank 0); trainer
  // 0 publishes the manifest and `latest` once every shard file is durable.
  Status SaveCheckpoint();
  // Loads this rank's shards of every parameter and optimizer tensor from a checkpoint
  // written under any plan (a step directory, a checkpoint_dir or a full-model file), and
  // where training stood. On an error nothing was changed.
  Status LoadCheckpoint(const std::string& path);

  Model& model() { return *model_; }
  const ParallelPlan& plan() const { return plan_; }
  int64_t step() const { return step_; }
  int rank() const { return rank_; }
  int world() const { return world_; }
  int dp_rank() const { return groups_.dp_rank; }
  int pp_rank() const { return groups_.pp_rank; }
  // Text data: the byte-unigram entropy of the file in nats (0 otherwise).
  double unigram_entropy() const { return unigram_entropy_; }
  // What this rank reported while it ran (the evaluations, for train.plot_path).
  const Progress& progress() const { return *progress_; }
  // Progress also sets the trainer's metrics (docs/metrics.md) in `registry` (not owned; it
  // must outlive Run). Call before Run.
  void SetMetrics(MetricsRegistry* registry);

 private:
  explicit Trainer(const TrainJob& job);
  static Result<std::unique_ptr<Trainer>> Build(const TrainJob& job, Node* node, bool launched);
  Status MakeGroups();
  // parallel.partition: cost (trainer 0 measures each unit, the others read its figures).
  Result<std::vector<double>> SharedUnitCosts();
  Status Connect();
  Result<TrainSummary> RunSteps();
  // Inference (job.infer, trainer_infer.cc): the checkpoint's parameters (a step directory, or
  // a checkpoint_dir's latest) into this plan, then evaluation or generation.
  Status LoadParameters(const std::string& where);
  // ps and hybrid inference: every server serves checkpoint `path` read-only.
  Status CheckServersServe(const std::string& path);
  Result<TrainSummary> RunInference();
  Status Generate();
  std::vector<Batch> NextBatches();
  Result<double> TrainStep();
  // Sums `v` over the pipeline, then averages it over the replicas when they all-reduce (a
  // step's loss; in ps mode each replica keeps its own).
  Status ReduceLoss(double* v);
  Result<double> ClipGradients();
  std::string PipelineTrainers() const;  // "the pipeline of trainers 1 3" (errors)
  Status Finish();  // a cluster run: waits for every trainer
  // Elastic jobs (cluster.elastic, trainer_elastic.cc): a trainer that joined the running job
  // starts at the step the data split gives it; before each step the split is leased, a stop
  // signal makes the trainer leave it (it trains the steps already leased, then stops), and
  // false means this trainer's last step is done.
  Status StartElastic();
  Result<bool> ElasticStep();
  Status CheckElastic() const;
  Status WritePipelineTimeline();  // sync.trace_path with pp > 1
  std::vector<ShardTensor> CheckpointTensors();  // parameters and optimizer state
  CommLayout Layout() const;  // this trainer's place in the job, for the comm model
  // What this rank holds, beside ZeRO's arithmetic, and `step_peak` (the allocator's high-water
  // mark during a step) (trainer_memory.cc).
  void LogMemory(int64_t step_peak);

  TrainJob job_;
  std::unique_ptr<ComputeDevice> device_;
  ParallelPlan plan_;
  ParallelGroups groups_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  ShardedOptimizer* sharded_ = nullptr;  // optimizer_ under ZeRO-1/2/3 (parallel.zero)
  std::unique_ptr<DataSource> data_;
  std::vector<Batch> eval_set_;
  std::unique_ptr<pipeline::StageExecutor> executor_;
  // A cluster run.
  Node* node_ = nullptr;
  int rank_ = 0, world_ = 1;
  std::unique_ptr<Trace> trace_;
  std::unique_ptr<PsClient> client_;
  std::unique_ptr<PsSync> ps_;
  std::shared_ptr<ElasticSplit> elastic_;  // cluster.elastic
  int64_t leave_at_ = -1;                  // leaving an elastic job: the step it stops at
  std::unique_ptr<BucketAllReducer> reducer_;  // all-reduce, ZeRO-1/2
  std::unique_ptr<Zero3Sync> zero3_;            // ZeRO-3 (the model's unit hooks)
  std::vector<GradSync*> syncs_;  // ps_ and/or reducer_ or zero3_
  std::vector<Batch> lookahead_;  // the next step's batches, already prefetched
  std::unique_ptr<Progress> progress_;
  std::function<Status()> stop_check_;
  PipelineSummary pipeline_;
  CommAccounting comm_;
  Shape micro_batch_;  // a micro-batch's leading shape (Model::LeadingShape), from the first step
  int64_t step_ = 0;
  double unigram_entropy_ = 0;
};

}  // namespace strata
